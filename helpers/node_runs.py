"""Running torchrun agents as subprocesses on this host, and watching their sockets (chapters 7.x).

    runs = node_runs.run_nodes([argv0, argv1], env=cluster.shared_host_env(2), timeout=60)
    node_runs.listening(runs)   # (node, role, ip, port) of every socket that listened

``run_nodes`` starts each node in its own session, watches the TCP sockets of its process
tree while it runs, and kills whatever is left however it ends. ``helpers.cluster`` builds
the argvs and re-exports these names.
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import psutil

from . import plans, protocol
from .machine import this as this_machine


@dataclass
class NodeRun:
    """One node's subprocess: its argv, exit code, output, and every TCP socket seen in its tree."""

    argv: list[str]
    returncode: int | None = None
    stdout: str = ""
    sockets: set = field(default_factory=set)  # (role, pid, status, ip, port, remote ip, remote port)
    pids: set = field(default_factory=set)


def _role(p: psutil.Process) -> str:
    """The agent is the process torchrun started; its children are the ranks."""
    cmd = " ".join(p.cmdline())
    return "agent" if "torch.distributed.run" in cmd or "torchrun" in cmd else "rank"


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


TCP_STATES = {"01": psutil.CONN_ESTABLISHED, "0A": psutil.CONN_LISTEN}  # /proc/net/tcp's codes


def _address(field: str, family: int) -> tuple[str, int]:
    """An ``ADDR:PORT`` of /proc/net/tcp: the address's 32-bit words are in the host's byte order."""
    hexip, hexport = field.split(":")
    raw = bytes.fromhex(hexip)
    if sys.byteorder == "little":
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, raw), int(hexport, 16)


def _proc_sockets(pid: int) -> list[tuple]:
    """(status, ip, port, remote ip, remote port) of the process's TCP sockets, from its own
    /proc/PID/net tables: those of its network namespace, which need not be ours (Linux)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        with open(f"/proc/{pid}/net/{table}") as f:
            for words in (line.split() for line in f.readlines()[1:]):
                if words[9] in inodes and words[3] in TCP_STATES:
                    found.append((TCP_STATES[words[3]], *_address(words[1], family), *_address(words[2], family)))
    return found


def _sockets(p: psutil.Process) -> list[tuple]:
    """/proc where there is one (it sees into other namespaces), psutil elsewhere (macOS)."""
    if os.path.isdir(f"/proc/{p.pid}/net"):
        return _proc_sockets(p.pid)
    return [(c.status, c.laddr.ip, c.laddr.port, *(c.raddr or ("", 0)))
            for c in p.net_connections(kind="tcp") if c.status in TCP_STATES.values()]


def _look(run: NodeRun, pid: int) -> None:
    """Note the TCP sockets that the node's processes hold right now (LISTEN and ESTABLISHED)."""
    for p in _tree(pid):
        try:
            role, found = _role(p), _sockets(p)
        except (OSError, psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        run.pids.add((role, p.pid))
        run.sockets.update((role, p.pid, *s) for s in found)


def kill_tree(pid: int) -> None:
    """Kill a node's agent and every rank under it: the tree is listed first, then all are killed.

    It waits for the ranks; the agent is left for its parent to reap (``Popen.wait``), which then
    still reads its exit status.
    """
    procs = _tree(pid)
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs[1:], timeout=5)


def host_job(argvs: list[list[str]], env: dict[str, str]) -> plans.HostJob | None:
    """The torchrun agents ``argvs`` start on this host, with the backend ``env`` sets; else None."""
    nprocs = {a[a.index("--nproc-per-node") + 1] if "--nproc-per-node" in a else None for a in argvs}
    if len(nprocs) != 1 or None in nprocs:
        return None
    return plans.HostJob(len(argvs), int(nprocs.pop()), env.get(protocol.BACKEND) or None)


def run_nodes(argvs: list[list[str]], env: dict[str, str] | None = None, timeout: float = 60,
              interval: float = 0.1, late: float = 0.0) -> list[NodeRun]:
    """Start every node, each ``late`` seconds after the one before (nodes of a real cluster never
    start together), watch their sockets until all exit, and never leave one running.

    Agents that would put two NCCL ranks on one GPU are refused first (``plans.place_ranks``).

    Past ``timeout`` seconds, or on any exception (a KeyboardInterrupt too), the ``finally``
    kills every node's whole process tree; a node that was killed has returncode -9.
    """
    full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    if job := host_job(argvs, full_env):  # refused before anything starts, not by NCCL inside the ranks
        plans.place_ranks(this_machine(), job)
    runs, procs, logs = [NodeRun(a) for a in argvs], [], []
    try:
        for i, argv in enumerate(argvs):
            time.sleep(late if i else 0)
            log = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a full pipe would block a rank
            logs.append(log)
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                          start_new_session=True))
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            for run, p in zip(runs, procs):
                _look(run, p.pid)
            time.sleep(interval)
    finally:
        for p in procs:
            if p.poll() is None:
                kill_tree(p.pid)
            p.wait()
        for run, p, log in zip(runs, procs, logs):
            run.returncode = p.returncode
            log.seek(0)
            run.stdout = log.read()
            log.close()
    return runs


def listening(runs: list[NodeRun]) -> list[tuple]:
    """(node, role, ip, port) of every LISTEN socket seen, sorted."""
    return sorted({(i, role, ip, port) for i, r in enumerate(runs)
                   for role, _, status, ip, port, *_ in r.sockets if status == psutil.CONN_LISTEN})


def every_interface(ip: str) -> bool:
    return ip in ("0.0.0.0", "::")


def bound_to(ip: str) -> str:
    """What a listening socket's address means, in words."""
    if ip == "::":
        return "`::`, every interface, IPv4 ones too (a dual-stack socket)"
    return "`0.0.0.0`, every IPv4 interface" if ip == "0.0.0.0" else f"`{ip}` alone"
