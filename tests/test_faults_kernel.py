"""The launcher under faults that need a kernel: interrupted, killed, or launching beside another.

Each kernel is ``python -m helpers.probes.launch_faults`` (faults_kit.Kernel), which launches
when told, as a Jupyter kernel does when a cell runs. Every trial goes through faults_kit's leak
check; the kernels a case keeps are roots of it too (their fds and their family).
"""
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import psutil
from faults_kit import Kernel, alive, private_tmp, run_trials, wait_mid_run  # noqa: F401 - a fixture


def test_sigint_mid_run_interrupts_the_launch_and_leaves_nothing():
    """The stop button sends the kernel SIGINT; one kernel is interrupted ten times, as in a session."""
    kernel = Kernel()
    try:
        kernel.expect("ready")
        kernel.send("ok")
        kernel.expect("ok")  # its forkserver is up: the snapshot holds it

        def trial(i):
            kernel.send("hang")
            ranks = [p for p in kernel.wait_mid_run() if "forkserver" not in " ".join(p.cmdline())
                     and "resource_tracker" not in " ".join(p.cmdline())]
            os.kill(kernel.pid, signal.SIGINT)
            answer = kernel.expect("interrupted", timeout=30)
            assert answer["levels"] == [20, 20], answer  # the launcher's loggers back at INFO
            assert answer["seconds"] < 30, answer
            survivors = [p for p in psutil.wait_procs(ranks, timeout=5)[1] if alive(p)]
            return [f"rank process {p.pid} after SIGINT" for p in survivors]
        run_trials("4. SIGINT to the kernel mid-run", trial, roots=(kernel.pid,))
        kernel.send("ok")
        assert kernel.expect("ok")["sums"] == [1.0, 1.0]  # and the kernel launches again
    finally:
        kernel.close()


def test_ranks_end_by_themselves_when_the_kernel_is_killed():
    """SIGKILL gives the launcher no chance to clean up; its ranks, by pid, must end on their own.

    Each trial's kernel is forked from one that has imported helpers (a fresh Python importing
    torch ten times would be most of the case's time); two trials run at once.
    """
    forks, lock = Kernel("fork"), threading.Lock()
    try:
        forks.expect("ready")

        def trial(i):
            tmp = Path(tempfile.gettempdir()) / f"kernel-{i}"
            tmp.mkdir()
            with lock:
                forks.send(str(tmp))
                pid = forks.expect("forked")["pid"]
            kin = wait_mid_run(tmp, pid)
            assert len(kin) >= 4, kin  # the forkserver, its resource tracker, two ranks
            kernel = psutil.Process(pid)
            kernel.kill()
            deadline = time.monotonic() + 20
            while any(alive(p) for p in [kernel, *kin]) and time.monotonic() < deadline:
                time.sleep(0.05)
            return [f"process {p.pid} of the killed kernel ({' '.join(p.cmdline())[-60:]})"
                    for p in kin if alive(p)]  # its run folder, the leak check looks for
        run_trials("5. the kernel is SIGKILLed mid-run", trial, roots=(forks.pid,), together=2)
    finally:
        forks.close()


def test_two_kernels_launching_at_once_both_succeed():
    """Two kernels started together launch together, ten times: ports and run ids must not collide."""
    kernels = [Kernel(), Kernel()]
    try:
        for k in kernels:
            k.expect("ready")
            k.send("ok")
        assert [k.expect("ok")["sums"] for k in kernels] == [[1.0, 1.0]] * 2  # both started cold, at once

        def trial(i):
            for k in kernels:
                k.send("ok")
            answers = [k.expect("ok") for k in kernels]
            assert [a["sums"] for a in answers] == [[1.0, 1.0]] * 2
            a, b = answers
            assert a["start"] < b["end"] and b["start"] < a["end"], answers  # the two overlapped
        run_trials("7. two kernels launch at once", trial, roots=tuple(k.pid for k in kernels))
    finally:
        for k in kernels:
            k.close()
