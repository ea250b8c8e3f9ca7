"""python -m helpers.run: argument parsing and a real run under the torchrun CLI."""
import json
import os
import subprocess
import sys

import pytest

from helpers.run import parse, resolve


def test_parse_literals_and_strings():
    assert parse(["ddp_mnist.train", "--epochs", "2", "--lr=0.1", "--name", "run-a"]) == (
        "ddp_mnist.train", {"epochs": 2, "lr": 0.1, "name": "run-a"})


def test_parse_rejects_bad_input():
    with pytest.raises(SystemExit):
        parse([])
    with pytest.raises(SystemExit, match="needs a value"):
        parse(["ddp_mnist.train", "--epochs"])
    with pytest.raises(SystemExit, match="module.function"):
        resolve("train")


def test_recipe_runs_under_the_real_torchrun_cli():
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node", "2", "-m", "helpers.run",
         "ddp_mnist.train", "--epochs", "1"],
        capture_output=True, text=True, timeout=180, env={**os.environ, "HELPERS_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout[out.stdout.index("{"):])
    assert summary["world_size"] == 2 and summary["rank"] == 0 and summary["steps"] > 0
