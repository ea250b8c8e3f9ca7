"""helpers.analysis.margins: a comparison of paired rounds, and its margin over their scatter."""
import json
import math
import random

import pytest

from helpers.analysis import margins


def test_margin_is_the_median_log_ratio_over_its_standard_error():
    c = margins.compare("b slower", [1.15, 1.20, 1.25], record=False)
    logs = [math.log(r) for r in (1.15, 1.20, 1.25)]
    mad = sorted(abs(x - logs[1]) for x in logs)[1]
    assert c.ratio == pytest.approx(1.20) and c.scatter == pytest.approx(1.4826 * mad)
    assert c.margin == pytest.approx(logs[1] / (1.4826 * mad / math.sqrt(3)))
    assert c.clear() and "1.20 times (median of 3 paired rounds" in c.said()


def test_one_ruined_round_does_not_sink_a_clear_effect():
    steady = [1.30, 1.28, 1.32, 1.31, 1.29]
    ruined = steady[:4] + [0.6]  # a burst of load in one round
    assert margins.compare("x", ruined, record=False).clear()
    # ... where a "min over rounds" test, as the chapters had, flips
    assert min(ruined) < 1


def test_noise_around_no_difference_is_not_clear_and_more_rounds_do_not_make_it_so():
    rng = random.Random(0)
    for n in (3, 10, 40):
        c = margins.compare("x", [math.exp(rng.gauss(0, 0.1)) for _ in range(n)], record=False)
        assert not c.clear(), c


def test_rounds_needed_shrinks_with_the_effect_over_its_scatter():
    c = margins.compare("x", [1.02, 1.10, 1.06], record=False)
    need = margins.rounds_needed(c)
    assert need > 3 and margins.rounds_needed(margins.compare("x", [1.2, 1.3, 1.25], record=False)) <= 3
    longer = margins.compare("x", [1.02, 1.10, 1.06] * math.ceil(need / 3), record=False)
    assert longer.margin >= margins.TARGET
    assert margins.rounds_needed(margins.compare("x", [0.9, 0.95, 1.0], record=False)) > 10 ** 6


def test_a_scatter_below_the_floor_counts_as_the_floor():
    assert margins.compare("x", [1.01, 1.01, 1.01], record=False).scatter == margins.FLOOR


@pytest.mark.parametrize("bad", [[], [1.0, 0.0], [1.0, -2.0], [float("inf")], [float("nan")]])
def test_bad_ratios_are_refused(bad):
    with pytest.raises(ValueError, match="positive number"):
        margins.compare("x", bad)


def test_each_comparison_is_recorded_where_bench_load_asks(tmp_path, monkeypatch):
    path = tmp_path / "m.jsonl"
    monkeypatch.setenv(margins.RECORD, str(path))
    margins.compare("first", [1.5, 1.6, 1.7])
    margins.compare("second", [1.1, 1.2])
    got = margins.read(path)
    assert [g["name"] for g in got] == ["first", "second"] and got[0]["ratios"] == [1.5, 1.6, 1.7]
    assert got[1]["margin"] == pytest.approx(margins.compare("second", [1.1, 1.2], record=False).margin)
    monkeypatch.delenv(margins.RECORD)
    margins.compare("third", [2.0])
    assert len(path.read_text().splitlines()) == 2 and json.loads(path.read_text().splitlines()[0])
    assert margins.read(tmp_path / "absent.jsonl") == []


def test_two_runs_apart_by_their_combined_errors():
    big = margins.compare("big", [1.50, 1.55, 1.52, 1.54, 1.53], record=False)
    small = margins.compare("small", [1.20, 1.30, 1.25, 1.22, 1.28], record=False)
    got = margins.apart(big, small)
    se = math.hypot(big.scatter / math.sqrt(5), small.scatter / math.sqrt(5))
    assert got == pytest.approx((big.center - small.center) / se) and got > margins.TARGET
    assert margins.apart(small, big) == pytest.approx(-got)
    assert abs(margins.apart(big, margins.compare("same", [1.49, 1.56, 1.52, 1.55, 1.51], record=False))) < 1


def test_rounds_are_added_until_the_margin_is_clear_and_no_further_than_the_cap(tmp_path, monkeypatch):
    rng = random.Random(2)
    asked = []

    def more(k):
        asked.append(k)
        return [math.exp(rng.gauss(0.05, 0.1)) for _ in range(k)]
    path = tmp_path / "m.jsonl"
    monkeypatch.setenv(margins.RECORD, str(path))
    start = [1.2, 0.9, 1.1]  # a 5% effect under 10% scatter: 3 rounds cannot show it
    c = margins.until_clear("small effect", start, more, cap=200)
    assert c.clear() and c.ratios[:3] == tuple(start) and c.n == 3 + sum(asked) <= 200
    assert [g["name"] for g in margins.read(path)] == ["small effect"]  # recorded once, as it ended
    asked.clear()
    capped = margins.until_clear("no effect", [1.0, 1.01, 0.99], lambda k: asked.append(k) or [1.0] * k, cap=8)
    assert capped.n == 8 and not capped.clear() and sum(asked) == 5  # at the cap, returned short
    untouched = margins.until_clear("clear at once", [1.5, 1.6, 1.55], more, cap=8)
    assert untouched.n == 3


def test_a_claim_is_said_as_shown_or_as_left_open_at_the_cap():
    from helpers import sentences
    shown = sentences.margin_said(margins.compare("x", [1.5, 1.6, 1.55], record=False), "the wide MLP gained more")
    assert shown.startswith("The wide MLP gained more: 1.55 times (median of 3 paired rounds") and shown.endswith(").")
    open_ = sentences.margin_said(margins.compare("x", [1.0, 1.02, 0.99], record=False), "the wide MLP gained more")
    assert open_.startswith("This run could not show that the wide MLP gained more: 1.00 times") and "after 3 rounds" in open_
