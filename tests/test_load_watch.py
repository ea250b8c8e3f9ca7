"""machine.LoadWatch: other processes' share of the cores, with this process's own children left out."""
import subprocess
import sys
import time

import psutil
import pytest

from helpers import machine, sentences

SPIN = "import time\nt = time.time()\nwhile time.time() - t < 3: pass"


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def _foreign() -> psutil.Process:
    """A spinner that is not this process's descendant: its shell exits and it is re-parented."""
    out = subprocess.run(["sh", "-c", f'{sys.executable} -c "{SPIN}" > /dev/null 2>&1 & echo $!'],
                         capture_output=True, text=True, check=True)
    p = psutil.Process(int(out.stdout.split()[-1]))
    assert p.ppid() != psutil.Process().pid
    return p


def test_a_foreign_spinner_counts_and_a_child_of_ours_does_not():
    """In CPU seconds read off each spinner, not in shares of the wall: a machine other work keeps
    busy (CI's, where two watches a second apart both read 1.8 of 2 cores) only gives the spinners
    less CPU, and whatever CPU they got must land on the right side."""
    child = subprocess.Popen([sys.executable, "-c", SPIN])
    foreign = _foreign()
    try:
        time.sleep(0.3)  # past the interpreters' start
        kid = psutil.Process(child.pid)
        c0, f0, own0 = _cpu(kid), _cpu(foreign), machine._own_seconds()
        with machine.LoadWatch() as w:
            time.sleep(1.0)
        c1, f1, own1 = _cpu(kid), _cpu(foreign), machine._own_seconds()
    finally:
        child.kill()
        foreign.kill()
        child.wait()
    ran_child, ran_foreign = c1 - c0, f1 - f0
    assert ran_child > 0.05 and ran_foreign > 0.05, (ran_child, ran_foreign)  # each got some CPU
    assert own1 - own0 >= 0.9 * ran_child - 0.02, (own1 - own0, ran_child)  # the child is ours
    assert w.load.others * w.load.seconds >= 0.9 * ran_foreign - 0.05, (w.load, ran_foreign)  # the other is not
    assert w.load.cores == machine.usable_cores() and 0 <= w.load.share <= 1.05


@pytest.mark.parametrize("others, word", [(0.05, "quiet"), (0.9, "busy")])
def test_the_sentence_says_how_busy_and_what_it_means(others, word):
    said = sentences.load_said(machine.Load(seconds=30.0, others=others, cores=2))
    assert word in said and "of this machine's 2 cores" in said
    reported = sentences.load_said(machine.Load(seconds=30.0, others=others, cores=2), paired=False)
    assert word in reported and "comparison" not in reported  # a page that only reports its timings
