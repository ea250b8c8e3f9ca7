"""Chapter 7.2's hangs: each case under each tool ends within its timeout, and the tools that can
name the cause do. Every combination goes through the fault suite's leak check."""
import time

import pytest
import torch
from faults_kit import private_tmp, run_trials  # noqa: F401 - private_tmp is a fixture

from helpers import LaunchTimeout, RankError, analysis, launch, stacks
from helpers.analysis import hangs as messages
from helpers.recipes import hangs, smoke

GROUP_TIMEOUT, LAUNCH_TIMEOUT, HANG_TIMEOUT = 2.0, 30.0, 6.0

# case -> tool -> (what ends the job, whether what it says names the cause)
EXPECTED = {
    "skip": {"none": (LaunchTimeout, True), "timeout": (RankError, False), "detail": (RankError, True),
             "monitored": (RankError, True)},
    "mismatch": {"none": (LaunchTimeout, True), "timeout": (RankError, False), "detail": (RankError, True),
                 "monitored": (RankError, False)},
    # gloo checks sizes as bytes arrive, and aborts the rank: no hang, but no shapes named either
    "shape": {"none": (RankError, False), "timeout": (RankError, False), "detail": (RankError, True),
              "monitored": (RankError, False)},
}


@pytest.fixture(scope="module", autouse=True)
def warm():
    """The forkserver first, so the leak check holds it to the same pid through every trial."""
    launch(smoke.allreduce_rank, nprocs=2, show=None)


@pytest.mark.parametrize("case", hangs.CASES)
@pytest.mark.parametrize("tool", hangs.TOOLS)
def test_each_hang_ends_within_its_timeout_and_the_tool_says_what_it_can(case, tool):
    ends, names = EXPECTED[case][tool]
    limit = HANG_TIMEOUT if tool == "none" else LAUNCH_TIMEOUT

    def trial(i):
        start = time.monotonic()
        with pytest.raises((RankError, LaunchTimeout)) as info:
            launch(hangs.hang, nprocs=2, backend="gloo", show=None, timeout=limit, case=case, tool=tool,
                   timeout_s=GROUP_TIMEOUT)
        seconds = time.monotonic() - start
        assert type(info.value) is ends, str(info.value)[:2000]
        # the launcher raises LaunchTimeout only past its deadline, and RankError only before it:
        # the type says which came first, and a timeout's wait is at least its limit
        assert seconds >= limit or ends is RankError, seconds
        assert analysis.names_cause(case, info.value) is names, analysis.said(info.value)
    run_trials(f"7.2 {case} / {tool}", trial, n=1)


def test_what_each_tool_says():
    def said(case, tool):
        limit = HANG_TIMEOUT if tool == "none" else LAUNCH_TIMEOUT
        with pytest.raises((RankError, LaunchTimeout)) as info:
            launch(hangs.hang, nprocs=2, backend="gloo", show=None, timeout=limit, case=case, tool=tool,
                   timeout_s=GROUP_TIMEOUT)
        return info.value
    e = said("skip", "none")
    assert str(e.where[0]).startswith("in all_reduce, called from hangs.py line")
    assert str(e.where[1]).startswith("in no collective, at hangs.py line") and "in _step" in str(e.where[1])
    assert "rank 0: in all_reduce" in str(e) and set(e.stacks) == {0, 1}
    ms = str(int(GROUP_TIMEOUT * 1000))  # what each says is keyed through analysis.hangs' patterns
    timed_out = messages.TIMED_OUT.search(analysis.said(said("skip", "timeout")))
    assert timed_out and timed_out[1] == ms
    missing = messages.MISSING.search(analysis.said(said("skip", "monitored")))
    assert missing and (missing[1].strip(), missing[2]) == ("1", ms)
    assert analysis.said(said("skip", "monitored")).startswith("rank 0: ")
    shape = said("shape", "timeout")
    assert shape.exc_type == "ProcessDied" and "SIGABRT" in shape.message and messages.SIZE.search(shape.message)


@pytest.mark.parametrize("text, case", [
    ("Collectives differ in the following aspects: \t Sequence number: 3vs 3  Op type: ALLREDUCEvs BROADCAST",
     "mismatch"),
    ("Collectives differ in the following aspects:  Op type: [BROADCAST] vs [ALLREDUCE]", "mismatch"),
    ("Collectives differ in the following aspects:  Tensor shapes: 5vs 4", "shape"),
    ("Collectives differ in the following aspects:  Tensor shapes: [4] vs [5]", "shape"),
    ("Rank 1 failed to pass monitoredBarrier in 2000 ms", "skip"),
])
def test_each_cause_is_named_in_either_spelling_and_no_other(text, case):
    error = RankError(0, "RuntimeError", text, "")
    assert [c for c in hangs.CASES if analysis.names_cause(c, error)] == [case]


@pytest.mark.skipif(not hasattr(torch._C._distributed_c10d, "_dump_fr_trace_json"),
                    reason="this torch cannot dump a flight recorder on demand")
def test_gloo_records_into_the_flight_recorder_and_detail_adds_two_all_gathers():
    plain, detail = (launch(hangs.recorded, nprocs=2, backend="gloo", show=None, detail=d) for d in (False, True))
    assert [r["entries"] for r in plain] == [[("gloo:all_reduce", [[4]])]] * 2
    for r in detail:
        names = [name for name, _ in r["entries"]]
        assert names[-1] == "gloo:all_reduce" and names.count("gloo:all_gather") == 2, r["entries"]


def test_the_chapters_sentences_follow_the_machine():
    from helpers import plans, sentences
    for name, m in plans.PROFILES.items():
        s = sentences.hangs(m)["hg_recorder_here"]
        assert m.describe() in s and "gloo" in s and ("ran over gloo" in s) is bool(m.n_gpus), (name, s)


DUMP = '''Thread 0x00007f9ecbbff6c0 (most recent call first):
  File "/x/helpers/worker.py", line 43 in _exit_when_gone
  File "/usr/lib/python3.11/threading.py", line 982 in run

Current thread 0x00007f9f881d2b80 (most recent call first):
  File "{torch}/distributed/distributed_c10d.py", line 3913 in all_reduce
  File "{torch}/distributed/c10d_logger.py", line 83 in wrapper
  File "/home/me/train.py", line 12 in step
  File "/x/helpers/worker.py", line 68 in rank_entry
'''


def test_where_reads_the_main_thread_of_a_dump():
    import os
    import torch
    w = stacks.where(DUMP.format(torch=os.path.dirname(torch.__file__)))
    assert (w.collective, w.file, w.line, w.func) == ("all_reduce", "/home/me/train.py", 12, "step")
    assert str(w) == "in all_reduce, called from train.py line 12 in step"
    assert stacks.where("") is None
