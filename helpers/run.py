"""Run a recipe under the real torchrun CLI, on one GPU node or many.

    # one node, one process per GPU (or per CPU share):
    torchrun --standalone --nproc-per-node 8 -m helpers.run ddp_mnist.train --epochs 3

    # two nodes; run this on each, with the first node's address:
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \\
             --rdzv-endpoint node0.example:29500 -m helpers.run ddp_mnist.train

RECIPE is ``module.function`` under ``helpers/recipes``. Each ``--key value``
becomes a keyword argument; values are read as Python literals when they
parse as one (``--epochs 3``, ``--lr 0.1``), else kept as strings.
"""
from __future__ import annotations

import ast
import importlib
import json
import os
import sys


def parse(argv: list[str]) -> tuple[str, dict]:
    if not argv or argv[0].startswith("-"):
        raise SystemExit(__doc__)
    recipe, rest, kwargs = argv[0], argv[1:], {}
    while rest:
        key = rest.pop(0)
        if not key.startswith("--"):
            raise SystemExit(f"expected --key value, got {key!r}")
        key, _, value = key[2:].partition("=")
        if not value:
            if not rest:
                raise SystemExit(f"--{key} needs a value")
            value = rest.pop(0)
        try:
            kwargs[key.replace("-", "_")] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            kwargs[key.replace("-", "_")] = value
    return recipe, kwargs


def resolve(recipe: str):
    module, _, name = recipe.rpartition(".")
    if not module:
        raise SystemExit(f"RECIPE is module.function, e.g. ddp_mnist.train; got {recipe!r}")
    return getattr(importlib.import_module(f"helpers.recipes.{module}"), name)


def _summary(result) -> str:
    """Rank 0's result as JSON, leaving out tensors and long lists."""
    if not isinstance(result, dict):
        return repr(result)
    keep = {k: v for k, v in result.items() if isinstance(v, (int, float, str, bool, type(None)))}
    return json.dumps(keep, indent=2)


def main(argv: list[str] | None = None) -> None:
    recipe, kwargs = parse(sys.argv[1:] if argv is None else argv)
    result = resolve(recipe)(**kwargs)
    if int(os.environ.get("RANK", 0)) == 0:
        print(_summary(result))


if __name__ == "__main__":
    main()
