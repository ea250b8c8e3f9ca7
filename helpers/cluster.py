"""From one machine to a cluster (chapter 7.3): torchrun's command for each node, run or written down.

One function builds the argv of node i of n; the notebook runs it on loopback and prints
the same argv for a cluster, and the SLURM script carries the same line::

    argv = cluster.torchrun_argv("multinode.whoami", nnodes=2, nproc=1, endpoint="127.0.0.1:29500",
                                 node=0, local_addr="127.0.0.1")
    runs = cluster.run_nodes([argv0, argv1], env=cluster.shared_host_env(2), timeout=60)
    cluster.slurm_script("multinode.whoami", nodes=4, nproc=8, interface="eth0")

``run_nodes`` starts each node as a subprocess in its own session, watches the TCP
sockets of its process tree while it runs, and kills whatever is left however it ends.
"""
from __future__ import annotations

import contextlib
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import psutil

from . import plans, protocol
from .machine import Machine
from .machine import this as this_machine

RDZV_PORT = 29500  # torchrun's usual rendezvous port; on loopback the OS picks a free one instead
LOOPBACK = "lo"
TORCHRUN = (sys.executable, "-m", "torch.distributed.run")  # this Python's torchrun, wherever its venv is


def free_port(host: str = "127.0.0.1") -> int:
    """A port no one listens on now: the OS picks it when we bind to port 0."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def torchrun_argv(recipe: str, *, nnodes: int, nproc: int, endpoint: str, rdzv_id: str = "job",
                  node: int | None = None, local_addr: str | None = None, args: dict | None = None,
                  torchrun: tuple[str, ...] = ("torchrun",), min_nodes: int | None = None,
                  max_restarts: int = 0, rdzv_conf: dict | None = None) -> list[str]:
    """torchrun's argv for one node of ``nnodes``, each with ``nproc`` ranks.

    ``node``: given, it says whether this node hosts the rendezvous store (node 0 does). Two
    agents on one machine must be told; on a cluster (``node=None``) each agent finds out by
    comparing the endpoint with its own host name. ``local_addr``: the address the agent
    announces to the others; None lets it use its host name's. ``min_nodes``: an elastic job of
    ``min_nodes`` to ``nnodes`` nodes (``--nnodes MIN:MAX``). ``max_restarts``: how often each
    agent may restart its ranks. ``rdzv_conf``: more of the rendezvous's settings, such as
    ``last_call_timeout``.
    """
    size = f"{min_nodes}:{nnodes}" if min_nodes is not None else str(nnodes)
    argv = [*torchrun, "--nnodes", size, "--nproc-per-node", str(nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id]
    conf = {**({"is_host": int(node == 0)} if node is not None else {}), **(rdzv_conf or {})}
    if conf:
        argv += ["--rdzv-conf", ",".join(f"{k}={v}" for k, v in conf.items())]
    if local_addr is not None:
        argv += ["--local-addr", local_addr]
    return argv + _restarts(max_restarts) + ["-m", "helpers.run", recipe, *recipe_args(args)]


def _restarts(max_restarts: int) -> list[str]:
    return ["--max-restarts", str(max_restarts)] if max_restarts else []


def standalone_argv(recipe: str, *, nproc: int, args: dict | None = None,
                    torchrun: tuple[str, ...] = ("torchrun",), max_restarts: int = 0) -> list[str]:
    """One node, all ranks on it: the rendezvous store lives in the agent, on a free port."""
    return [*torchrun, "--standalone", "--nproc-per-node", str(nproc), *_restarts(max_restarts),
            "-m", "helpers.run", recipe, *recipe_args(args)]


def recipe_args(args: dict | None) -> list[str]:
    return [t for k, v in (args or {}).items() for t in (f"--{k}", str(v))]


def interface_env(interface: str) -> dict[str, str]:
    """Which network interface gloo and NCCL open their data sockets on (not the rendezvous's)."""
    return {"GLOO_SOCKET_IFNAME": interface, "NCCL_SOCKET_IFNAME": interface}


def shared_host_env(ranks: int, interface: str = LOOPBACK, m: Machine | None = None) -> dict[str, str]:
    """The environment of torchrun agents that share one host (loopback "nodes", network namespaces):
    gloo on ``interface``, and each of the host's ``ranks`` its share of the cores.

    Gloo even where GPUs are: each agent numbers its own ranks from ``LOCAL_RANK`` 0, so every
    agent's first rank would pick NCCL on cuda:0, and NCCL refuses two ranks of a group on one GPU
    ("Duplicate GPU detected"). Each agent would also split all the cores among its own ranks alone.
    """
    m = m or this_machine()
    return {**interface_env(interface), protocol.BACKEND: "gloo", protocol.THREADS: str(m.threads_per_rank(ranks))}


def loopback_argvs(recipe: str, *, nnodes: int = 2, nproc: int = 1, port: int | None = None,
                   args: dict | None = None, **options) -> list[list[str]]:
    """Every node's argv for a job on 127.0.0.1, with this Python's torchrun; ``options`` are
    ``torchrun_argv``'s (``min_nodes``, ``max_restarts``, ``rdzv_conf``)."""
    port = port or free_port()
    return [torchrun_argv(recipe, nnodes=nnodes, nproc=nproc, endpoint=f"127.0.0.1:{port}",
                          rdzv_id=f"loopback-{port}", node=i, local_addr="127.0.0.1", args=args,
                          torchrun=TORCHRUN, **options)
            for i in range(nnodes)]


# --- SLURM -------------------------------------------------------------------------------------

def _shell_join(argv: list[str]) -> str:
    """shlex.join, but a word with a shell variable in it is double-quoted so the shell expands it."""
    return " ".join(f'"{w}"' if "$" in w else shlex.quote(w) for w in argv)


def slurm_script(recipe: str, *, nodes: int, nproc: int, interface: str, port: int = RDZV_PORT,
                 args: dict | None = None) -> str:
    """An sbatch script: one srun task per node, each a torchrun agent with ``nproc`` ranks."""
    argv = slurm_argv(recipe, nodes=nodes, nproc=nproc, port=port, args=args)
    return "\n".join([
        "#!/bin/bash",
        f"#SBATCH --job-name={recipe.split('.')[0]}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1  # one torchrun agent per node; it starts the node's ranks",
        "# the first node of the allocation hosts the rendezvous store",
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        *(f"export {k}={v}" for k, v in interface_env(interface).items()),
        "srun " + _shell_join(argv), ""])


def slurm_argv(recipe: str, *, nodes: int, nproc: int, port: int = RDZV_PORT,
               args: dict | None = None) -> list[str]:
    """The torchrun argv that ``slurm_script`` runs on every node, shell variables unexpanded."""
    return torchrun_argv(recipe, nnodes=nodes, nproc=nproc, endpoint=f"$head:{port}",
                         rdzv_id="$SLURM_JOB_ID", args=args)


def script_argv(script: str) -> list[str]:
    """The argv of the script's srun line, as the shell splits it (before expanding variables)."""
    line = next(ln for ln in script.splitlines() if ln.startswith("srun "))
    return shlex.split(line)[1:]


# --- Running the nodes -------------------------------------------------------------------------

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
              interval: float = 0.1) -> list[NodeRun]:
    """Start every node at once, watch their sockets until all exit, and never leave one running.

    Agents that would put two NCCL ranks on one GPU are refused first (``plans.place_ranks``).

    Past ``timeout`` seconds, or on any exception (a KeyboardInterrupt too), the ``finally``
    kills every node's whole process tree; a node that was killed has returncode -9.
    """
    full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    if job := host_job(argvs, full_env):  # refused before anything starts, not by NCCL inside the ranks
        plans.place_ranks(this_machine(), job)
    runs, procs, logs = [NodeRun(a) for a in argvs], [], []
    try:
        for argv in argvs:
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


# --- This machine's network facts ----------------------------------------------------------------

def interfaces() -> dict[str, list[str]]:
    """This machine's network interfaces and their IPv4 addresses."""
    return {name: [a.address for a in addrs if a.family == socket.AF_INET]
            for name, addrs in sorted(psutil.net_if_addrs().items())}


def ephemeral_ports() -> tuple[int, int]:
    """The range the OS picks a port from when a socket binds to port 0 (Linux's; IANA's elsewhere)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = f.read().split()
        return int(low), int(high)
    except OSError:
        return 49152, 65535
