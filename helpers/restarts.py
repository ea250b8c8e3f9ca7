"""Chapter 7.1's experiments with the elastic agent's restarts, shared by the chapter and bench/.

    outcome = restarts.rejoin_trial(shared_store=True, timeout=10)
    outcome.rejoined, outcome.seconds, outcome.said

``rejoin_trial`` launches ``recipes.elastic.rejoin``: rank 1 fails once its group is up,
the agent restarts both ranks, and the new ranks must form a plain gloo group again.
Whether the ranks use the store node 0's agent keeps for its whole life (torch's default) or
one of their own decides whether they can; ``store_memory`` shows what that store remembers.
``torchrun_restart`` and ``lose_a_node`` run ``recipes.elastic.train`` under the torchrun
CLI, as one node or as two nodes on loopback (``helpers.cluster``), one of which is lost.
"""
from __future__ import annotations

import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass

from . import analysis, checkpoint, cluster, protocol
from .launch import SEPARATE_STORE, LaunchTimeout, RankError, launch
from .machine import this as this_machine
from .recipes import elastic


@dataclass(frozen=True)
class Outcome:
    """One restarted launch: did the new ranks form a group, how long it took, and what was said."""

    shared_store: bool
    rejoined: bool
    seconds: float
    said: str


@contextmanager
def agent_store(shared: bool):
    """Run the block with the ranks' store kept by node 0's agent (torch's default: a second
    TCPStore beside the rendezvous's, made once and kept across rounds) or served by each round's
    rank 0; the caller's own setting of the variable comes back afterwards."""
    before = os.environ.get(SEPARATE_STORE)
    os.environ[SEPARATE_STORE] = "0" if shared else "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ[SEPARATE_STORE]
        else:
            os.environ[SEPARATE_STORE] = before


def first_line(e: BaseException) -> str:
    """An error's first line, without the gloo source path that says nothing to a reader."""
    return re.sub(r"\[/[^\]]*\] ", "", str(e).splitlines()[0] if str(e) else type(e).__name__)


def rejoin_trial(shared_store: bool, timeout: float = 10.0) -> Outcome:
    """One launch of ``elastic.rejoin`` with one restart; a failure to rejoin is an outcome, not an error."""
    start = time.perf_counter()
    with agent_store(shared_store):
        try:
            ranks = launch(elastic.rejoin, nprocs=2, max_restarts=1, show=None, timeout=timeout)
            said = f"restart {ranks[0]['restart']}: all_reduce gave {ranks[0]['sum']:g}"
            rejoined = all(r["restart"] == 1 and r["sum"] == 2 for r in ranks)
        except (RankError, LaunchTimeout) as e:
            said, rejoined = f"{type(e).__name__}: {first_line(e)}", False
    return Outcome(shared_store, rejoined, time.perf_counter() - start, said)


def store_memory(shared_store: bool, timeout: float = 30.0) -> list[dict]:
    """One launch of ``elastic.store_memory`` with one restart: each rank's view of the dead round's keys."""
    with agent_store(shared_store):
        return launch(elastic.store_memory, nprocs=2, max_restarts=1, show=None, timeout=timeout)


# --- The same restarts under the torchrun CLI, one node or two -----------------------------------

def _env(ranks: int) -> dict[str, str]:
    """One agent of ``ranks`` ranks: gloo's sockets on loopback, each rank its share of the cores."""
    return {**cluster.interface_env(cluster.LOOPBACK), protocol.THREADS: str(this_machine().threads_per_rank(ranks))}


@dataclass
class CliRun:
    """A torchrun job of ``elastic.train``: each node's command and process, rank 0's summary,
    and the newest checkpoint the job left in its folder."""

    argvs: list[list[str]]
    nodes: list[cluster.NodeRun]
    summary: dict
    seconds: float
    saved: dict


def _run(argvs: list[list[str]], env: dict[str, str], folder: str, timeout: float, late: float = 0.0) -> CliRun:
    start = time.perf_counter()
    nodes = cluster.run_nodes(argvs, env=env, timeout=timeout, late=late)
    seconds = time.perf_counter() - start
    if nodes[0].returncode != 0:
        raise RuntimeError(f"node 0 ended with {nodes[0].returncode}:\n{nodes[0].stdout[-3000:]}")
    return CliRun(argvs, nodes, analysis.printed_result(nodes), seconds, checkpoint.read(checkpoint.latest(folder)))


def torchrun_restart(folder: str, timeout: float = 120, **train) -> CliRun:
    """``torchrun --standalone --nproc-per-node 2 --max-restarts 1 -m helpers.run elastic.train``."""
    argv = cluster.standalone_argv("elastic.train", nproc=2, max_restarts=1, torchrun=cluster.TORCHRUN,
                                   args={"folder": folder, **train})
    return _run([argv], _env(2), folder, timeout)


def lose_a_node(folder: str, timeout: float = 120, last_call: int = 10, heartbeat: int = 1, late: float = 0.0,
                **train) -> CliRun:
    """Two nodes of one rank each, ``--nnodes 1:2 --max-restarts 1``; node 1 is lost mid-run.

    ``elastic.train(how="node")`` kills node 1's agent with its rank. Node 0's rank fails in its
    next collective, its agent restarts it, and the new round waits until node 1 has missed 3
    heartbeats of ``heartbeat`` seconds, then closes ``last_call`` seconds after node 0 joined
    it: the job carries on with half the world.

    ``last_call`` is also the start's grace: a round closes at once when both nodes are in it,
    but a node whose agent starts more than ``last_call`` seconds after node 0's (``late``, or a
    loaded machine) finds round 0 closed and the job running, or done, without it. Its joining is then a
    membership change, and in torch 2.14.1 that hangs: the new node waits for MASTER_ADDR under
    the new round's prefix, which node 0's agent, keeping its first round's store, never writes.
    Torch's defaults (30 s, heartbeats of 5 s) would make the restart take about 15 + 30 s.
    """
    conf = {"last_call_timeout": last_call, "keep_alive_interval": heartbeat, "keep_alive_max_attempt": 3}
    argvs = cluster.loopback_argvs("elastic.train", nnodes=2, min_nodes=1, max_restarts=1, rdzv_conf=conf,
                                   args={"folder": folder, "how": "node", "fail_rank": 1, **train})
    return _run(argvs, cluster.shared_host_env(2), folder, timeout, late)  # both "nodes" are this host
