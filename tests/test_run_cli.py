"""python -m helpers.run: argument parsing and a real run under the torchrun CLI."""

import pytest

from helpers.run import parse, resolve
from torchrun_cli import torchrun_json


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
    summary = torchrun_json(2, "ddp_mnist.train", "--epochs", "1")
    assert summary["world_size"] == 2 and summary["rank"] == 0 and summary["steps"] > 0


def test_parse_edge_cases_get_one_clear_line():
    assert parse(["m.f", "--name=", "--epochs", "2"]) == ("m.f", {"name": "", "epochs": 2})  # empty value
    assert parse(["m.f", "--lr", "-0.5"]) == ("m.f", {"lr": -0.5})  # a negative value is a value
    with pytest.raises(SystemExit, match="stray argument 'extra'"):
        parse(["m.f", "--epochs", "2", "extra"])
    with pytest.raises(SystemExit, match="recipe comes first"):
        parse(["--epochs", "2", "m.f"])
    with pytest.raises(SystemExit, match="--verbose needs a value"):
        parse(["m.f", "--verbose", "--epochs", "2"])


def test_unknown_recipes_name_the_ones_that_exist():
    for bad in ("nope.train", "ddp_mnist.nope", "ddp_mnist._job_that_raises"):
        with pytest.raises(SystemExit, match=r"no recipe .*ddp_mnist\.train.*smoke\.fail_on"):
            resolve(bad)
    assert resolve("ddp_mnist.train").__name__ == "train"
