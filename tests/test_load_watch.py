"""machine.LoadWatch: other processes' share of the cores, with this process's own children left out."""
import subprocess
import sys
import time

import psutil
import pytest

from helpers import machine, sentences

SPIN = "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass"


def _watch(start) -> machine.Load:
    with machine.LoadWatch() as w:
        proc = start()
        time.sleep(1.5)
        proc.wait()
    return w.load


def _foreign():
    """A spinner that is not this process's descendant: its shell exits and it is re-parented."""
    out = subprocess.run(["sh", "-c", f'{sys.executable} -c "{SPIN}" > /dev/null 2>&1 & echo $!'],
                         capture_output=True, text=True, check=True)
    pid = int(out.stdout.split()[-1])
    assert psutil.Process(pid).ppid() != psutil.Process().pid
    return psutil.Process(pid)


def test_a_foreign_spinner_counts_and_a_child_of_ours_does_not():
    own = _watch(lambda: subprocess.Popen([sys.executable, "-c", SPIN]))
    foreign = _watch(_foreign)
    # on a quiet machine about 0 against 1 core; on a saturated one about 1 against 2: a child's share
    # of the cores moves from "ours" to "others"
    assert foreign.others - own.others > 0.2, (own, foreign)
    assert own.cores == foreign.cores == machine.usable_cores() and 0 <= own.share <= 1.05


@pytest.mark.parametrize("others, word", [(0.05, "quiet"), (0.9, "busy")])
def test_the_sentence_says_how_busy_and_what_it_means(others, word):
    said = sentences.load_said(machine.Load(seconds=30.0, others=others, cores=2))
    assert word in said and "of this machine's 2 cores" in said
    reported = sentences.load_said(machine.Load(seconds=30.0, others=others, cores=2), paired=False)
    assert word in reported and "comparison" not in reported  # a page that only reports its timings
