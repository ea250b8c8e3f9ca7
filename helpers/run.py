"""Run a recipe under the real torchrun CLI, on one GPU node or many.

    # one node, one process per GPU (or per CPU share):
    torchrun --standalone --nproc-per-node 8 -m helpers.run ddp_mnist.train --epochs 3

    # two nodes; run this on each, with the first node's address:
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \\
             --rdzv-endpoint node0.example:29400 -m helpers.run ddp_mnist.train

RECIPE is ``module.function`` under ``helpers/recipes``. Each ``--key value``
becomes a keyword argument; values are read as Python literals when they
parse as one (``--epochs 3``, ``--lr 0.1``), else kept as strings.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import pkgutil
import sys

from helpers import devices, protocol

USAGE = "usage: python -m helpers.run RECIPE [--key value | --key=value ...]  (RECIPE is module.function)"


def parse(argv: list[str]) -> tuple[str, dict]:
    if not argv:
        raise SystemExit(__doc__)
    if argv[0].startswith("-"):
        raise SystemExit(f"the recipe comes first, before any --key; got {argv[0]!r}. {USAGE}")
    recipe, rest, kwargs = argv[0], argv[1:], {}
    while rest:
        token = rest.pop(0)
        if not token.startswith("--") or token == "--":
            raise SystemExit(f"expected --key value, got the stray argument {token!r}. {USAGE}")
        key, has_equals, value = token[2:].partition("=")
        if not has_equals:  # --key value: the value is the next token, which may be negative
            if not rest or rest[0].startswith("--"):
                raise SystemExit(f"--{key} needs a value. {USAGE}")
            value = rest.pop(0)
        try:  # "--key=" is an empty string, not the next token
            kwargs[key.replace("-", "_")] = ast.literal_eval(value) if value else ""
        except (ValueError, SyntaxError):
            kwargs[key.replace("-", "_")] = value
    return recipe, kwargs


def recipes() -> list[str]:
    """Every ``module.function`` that ``python -m helpers.run`` can start."""
    import helpers.recipes
    names = []
    for info in pkgutil.iter_modules(helpers.recipes.__path__):
        module = importlib.import_module(f"helpers.recipes.{info.name}")
        names += [f"{info.name}.{n}" for n, f in vars(module).items()
                  if inspect.isfunction(f) and f.__module__ == module.__name__ and not n.startswith("_")]
    return sorted(names)


def resolve(recipe: str):
    module, _, name = recipe.rpartition(".")
    if not module:
        raise SystemExit(f"RECIPE is module.function, e.g. ddp_mnist.train; got {recipe!r}")
    try:
        fn = getattr(importlib.import_module(f"helpers.recipes.{module}"), name, None)
    except ModuleNotFoundError as e:
        if e.name != f"helpers.recipes.{module}":
            raise  # the recipe exists but imports something missing: that traceback is the news
        fn = None
    if not callable(fn) or name.startswith("_"):
        raise SystemExit(f"no recipe {recipe!r}; the recipes are: {', '.join(recipes())}")
    return fn


def _summary(result) -> str:
    """Rank 0's result as JSON, leaving out tensors and long lists."""
    if not isinstance(result, dict):
        return repr(result)
    keep = {k: v for k, v in result.items() if isinstance(v, (int, float, str, bool, type(None)))}
    return json.dumps(keep, indent=2)


def main(argv: list[str] | None = None) -> None:
    recipe, kwargs = parse(sys.argv[1:] if argv is None else argv)
    fn = resolve(recipe)
    if (pinned := devices.pinned_backend(fn)) and not os.environ.get(protocol.BACKEND):
        os.environ[protocol.BACKEND] = pinned  # read by helpers.dist.setup inside the recipe
    result = fn(**kwargs)
    if int(os.environ.get("RANK", 0)) == 0:
        print(_summary(result))


if __name__ == "__main__":
    main()
