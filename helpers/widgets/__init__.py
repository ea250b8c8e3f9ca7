"""Interactive explorers: HTML controls and a JavaScript draw function, live in the browser with no
kernel, in JupyterLab and on the static web book alike; a PNG of the default setting without JavaScript.

``shell``: what every explorer is. One module per explorer, with its ``.js`` beside it;
``theory.js`` mirrors the helpers.theory formulas they need, ``planner_theory.js`` theory.planner
(tests/test_explorers.py and tests/test_planner_explorer.py run them under node against helpers.theory).
"""
from .amdahl import AmdahlExplorer, amdahl_explorer  # noqa: F401
from .fit import (FIT_DEFAULTS, GIB, GPT3_MODELS, FitExplorer, fit_advice, fit_case, fit_data,  # noqa: F401
                  fit_explorer, verdict)
from .slow_run import SlowRunExplorer, diagnosis_html, slow_run_explorer  # noqa: F401
from . import prediction  # noqa: F401
from .prediction import PredictionExplorer, prediction_explorer  # noqa: F401
from . import transformer  # noqa: F401
from .transformer import TransformerExplorer, transformer_explorer  # noqa: F401
from . import planner  # noqa: F401
from .planner import PlannerExplorer, planner_explorer  # noqa: F401
