"""Interactive explorers (ipywidgets) for JupyterLab. In the static book each shows its default figure."""
from __future__ import annotations
