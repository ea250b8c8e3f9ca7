"""From one machine to a cluster (chapter 7.3): torchrun's command for each node, run or written down.

One function builds the argv of node i of n; the notebook runs it on loopback and prints
the same argv for a cluster, and the SLURM script carries the same line::

    argv = cluster.torchrun_argv("multinode.whoami", nnodes=2, nproc=1, endpoint="127.0.0.1:29400",
                                 node=0, local_addr="127.0.0.1")
    runs = cluster.run_nodes([argv0, argv1], env=cluster.shared_host_env(2), timeout=60)
    cluster.slurm_script("multinode.whoami", nodes=4, nproc=8, interface="eth0")

``run_nodes`` (``helpers.node_runs``) starts each node as a subprocess in its own session,
watches the TCP sockets of its process tree while it runs, and kills whatever is left.
Every builder checks what it is given and raises ValueError on what torchrun or the shell
would misread: the words become a command line, and under SLURM a script the shell runs.
"""
from __future__ import annotations

import re
import shlex
import socket
import sys

import psutil

from . import protocol
from .machine import Machine, loopback_interface
from .machine import this as this_machine
from .node_runs import (NodeRun, bound_to, every_interface, host_job, kill_tree,  # noqa: F401 - re-exported
                        listening, run_nodes)

# torchrun's default port for a c10d rendezvous endpoint given without one (its docs and
# c10d_rendezvous_backend.DEFAULT_PORT); 29500 is --master-port's, for the static rendezvous.
# On loopback the OS picks a free port instead.
RDZV_PORT = 29400
LOOPBACK = loopback_interface()  # lo on Linux, lo0 on macOS
TORCHRUN = (sys.executable, "-m", "torch.distributed.run")  # this Python's torchrun, wherever its venv is


def free_port(host: str = "127.0.0.1") -> int:
    """A port no one listens on now: the OS picks it when we bind to port 0."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# --- What the builders accept ------------------------------------------------------------------

_RECIPE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")   # module.function under helpers/recipes/
_NAME = re.compile(r"[A-Za-z_][\w-]*")                   # a --key of the recipe, a --rdzv-conf key
_IFNAME = re.compile(r"[\w.:@-]{1,15}")                   # Linux: at most 15 characters, no spaces or /


def _count(name: str, value, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an int of at least {least}, not {value!r}")
    return value


def _check_job(recipe: str, nnodes: int, nproc: int, node: int | None, min_nodes: int | None,
               max_restarts: int, rdzv_conf: dict | None) -> None:
    if not isinstance(recipe, str) or not _RECIPE.fullmatch(recipe):
        raise ValueError(f"recipe must be module.function, as in 'multinode.whoami', not {recipe!r}")
    _count("nnodes", nnodes, 1)
    _count("nproc", nproc, 1)
    _count("max_restarts", max_restarts, 0)
    if min_nodes is not None and not 1 <= _count("min_nodes", min_nodes, 1) <= nnodes:
        raise ValueError(f"min_nodes must be from 1 to nnodes ({nnodes}), not {min_nodes}")
    if node is not None and not 0 <= _count("node", node, 0) < nnodes:
        raise ValueError(f"node must be from 0 to nnodes - 1 ({nnodes - 1}), not {node}")
    for k, v in (rdzv_conf or {}).items():  # torchrun splits --rdzv-conf at commas, then at '='
        if not _NAME.fullmatch(str(k)) or any(c in str(v) for c in ",= ") or str(v) == "":
            raise ValueError(f"rdzv_conf's {k}={v!r}: a key is a name and a value has no ',', '=' or space")


def _check_port(port: int) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port must be an int from 1 to 65535, not {port!r}")
    return port


def check_interface(interface: str) -> str:
    """A network interface's name as Linux allows it: what goes into an export line stays one word."""
    if not isinstance(interface, str) or not _IFNAME.fullmatch(interface):
        raise ValueError(f"not a network interface name: {interface!r} "
                         "(1 to 15 letters, digits, '.', '_', '-', ':', '@')")
    return interface


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
    _check_job(recipe, nnodes, nproc, node, min_nodes, max_restarts, rdzv_conf)
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
    _check_job(recipe, 1, nproc, None, None, max_restarts, None)
    return [*torchrun, "--standalone", "--nproc-per-node", str(nproc), *_restarts(max_restarts),
            "-m", "helpers.run", recipe, *recipe_args(args)]


def recipe_args(args: dict | None) -> list[str]:
    """``--key value`` for each of the recipe's keyword arguments; a key is a plain name."""
    for k in args or {}:
        if not isinstance(k, str) or not _NAME.fullmatch(k):
            raise ValueError(f"a recipe argument's name must be a plain name, not {k!r}")
    return [t for k, v in (args or {}).items() for t in (f"--{k}", str(v))]


def interface_env(interface: str) -> dict[str, str]:
    """Which network interface gloo and NCCL open their data sockets on (not the rendezvous's)."""
    check_interface(interface)
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

HEAD, JOB_ID = "$head", "$SLURM_JOB_ID"  # left for the shell on each node to expand


def _shell_join(argv: list[str], expand: set[int]) -> str:
    """shlex.join, except the words at ``expand`` (the builder's own, with a shell variable in
    them) are double-quoted so the shell expands them. Every other word, a recipe argument
    among them, is single-quoted: a ``$(...)`` in it stays text."""
    for i in expand:
        if not re.fullmatch(r"[\w$:.-]*", argv[i]):
            raise ValueError(f"{argv[i]!r} would not stay one word in double quotes")
    return " ".join(f'"{w}"' if i in expand else shlex.quote(w) for i, w in enumerate(argv))


def slurm_script(recipe: str, *, nodes: int, nproc: int, interface: str, port: int = RDZV_PORT,
                 args: dict | None = None) -> str:
    """An sbatch script: one srun task per node, each a torchrun agent with ``nproc`` ranks."""
    argv = slurm_argv(recipe, nodes=nodes, nproc=nproc, port=port, args=args)
    expand = {argv.index("--rdzv-endpoint") + 1, argv.index("--rdzv-id") + 1}
    return "\n".join([
        "#!/bin/bash",
        f"#SBATCH --job-name={recipe.split('.')[0]}",  # a checked recipe: letters, digits, '_'
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1  # one torchrun agent per node; it starts the node's ranks",
        "# the first node of the allocation hosts the rendezvous store",
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        *(f"export {k}={shlex.quote(v)}" for k, v in interface_env(interface).items()),
        "srun " + _shell_join(argv, expand), ""])


def slurm_argv(recipe: str, *, nodes: int, nproc: int, port: int = RDZV_PORT,
               args: dict | None = None) -> list[str]:
    """The torchrun argv that ``slurm_script`` runs on every node, shell variables unexpanded."""
    return torchrun_argv(recipe, nnodes=nodes, nproc=nproc, endpoint=f"{HEAD}:{_check_port(port)}",
                         rdzv_id=JOB_ID, args=args)


def script_argv(script: str) -> list[str]:
    """The argv of the script's srun line, as the shell splits it (before expanding variables)."""
    line = next(ln for ln in script.splitlines() if ln.startswith("srun "))
    return shlex.split(line)[1:]


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
