"""Two hosts on one machine (chapter 7.3): network namespaces joined by a veth pair. Linux, as root.

Each namespace has its own interfaces, addresses and routes, so a process started in it
(``ip netns exec NS ...``) sees a machine whose only ways out are its loopback and its end of
the pair, ``cl0``. A multi-node job run in two of them crosses a real (virtual) link::

    if not netns.why_not():
        hosts = netns.two_hosts("multinode.whoami", args={"out_dir": out}, env=env, timeout=60)
        hosts.runs, hosts.nodes, hosts.link  # the nodes' runs, (namespace, address), bytes on cl0
"""
from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import subprocess
from dataclasses import dataclass

from . import cluster

LINK = "cl0"  # each namespace's end of the pair
SUBNET = "10.77.0"  # a /24 that the host must not have already: checked before it is used


def _ip(*words: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *words], check=check, capture_output=True, text=True, timeout=10)


def _host_has(subnet: str) -> list[str]:
    """The host's interfaces that have an address in ``subnet``.0/24 already."""
    net = ipaddress.ip_network(f"{subnet}.0/24")
    return [n for n, addrs in cluster.interfaces().items() if any(ipaddress.ip_address(a) in net for a in addrs)]


@contextlib.contextmanager
def namespace_pair(prefix: str = "helpers-cl", subnet: str = SUBNET):
    """Two network namespaces joined by a veth pair, each end named ``cl0``; removed however it ends.

    Yields ``[(namespace, address), ...]``: two "machines" with addresses of their own. Needs root.
    """
    if _host_has(subnet):
        raise RuntimeError(f"this host already has an address in {subnet}.0/24 ({_host_has(subnet)})")
    names = [f"{prefix}{i}-{os.getpid()}" for i in range(2)]
    a, b = f"cla{os.getpid()}"[:15], f"clb{os.getpid()}"[:15]  # interface names: 15 characters at most
    try:
        for n in names:
            _ip("netns", "add", n)
        _ip("link", "add", a, "type", "veth", "peer", "name", b)
        for i, (n, end) in enumerate(zip(names, (a, b))):
            _ip("link", "set", end, "netns", n)
            _ip("-n", n, "link", "set", end, "name", LINK)
            _ip("-n", n, "addr", "add", f"{subnet}.{i + 1}/24", "dev", LINK)
            _ip("-n", n, "link", "set", LINK, "up")
            _ip("-n", n, "link", "set", "lo", "up")
        yield [(n, f"{subnet}.{i + 1}") for i, n in enumerate(names)]
    finally:  # deleting a namespace deletes its end of the pair, and so the pair
        for n in names:
            _ip("netns", "del", n, check=False)
        _ip("link", "del", a, check=False)


def why_not() -> str:
    """Why this process cannot make the pair, in words; "" when it can (a pair is made and removed)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "this process does not run as root"
    if not shutil.which("ip"):
        return "there is no `ip` command (iproute2)"
    try:
        with namespace_pair(prefix="helpers-probe"):
            return ""
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        said = getattr(e, "stderr", "") or str(e)
        return f"making them failed ({said.strip().splitlines()[-1] if said.strip() else type(e).__name__})"


def namespaces() -> list[str]:
    """The names of the network namespaces that ``ip netns`` lists now."""
    return [ln.split()[0] for ln in _ip("netns", "list", check=False).stdout.splitlines() if ln.strip()]


def link_bytes(namespace: str) -> dict[str, int]:
    """The bytes received and sent on the namespace's end of the pair so far."""
    stats = json.loads(_ip("-n", namespace, "-j", "-s", "link", "show", "dev", LINK).stdout)[0]["stats64"]
    return {"rx": stats["rx"]["bytes"], "tx": stats["tx"]["bytes"]}


@dataclass
class TwoHosts:
    """A job run on the pair: each node's run, each node's (namespace, address), bytes on each cl0."""

    runs: list
    nodes: list[tuple[str, str]]
    link: list[dict[str, int]]


def two_hosts(recipe: str, *, args: dict | None = None, env: dict[str, str] | None = None,
              timeout: float = 60) -> TwoHosts:
    """Run a 2-node job, one node in each namespace, its store on node 0's address; data over cl0."""
    with namespace_pair() as nodes:
        head = nodes[0][1]
        argvs = [["ip", "netns", "exec", ns, *cluster.torchrun_argv(
                     recipe, nnodes=2, nproc=1, endpoint=f"{head}:{cluster.RDZV_PORT}", rdzv_id="netns",
                     node=i, local_addr=addr, torchrun=cluster.TORCHRUN, args=args)]
                 for i, (ns, addr) in enumerate(nodes)]
        # The namespaces are one host's: their nodes share its GPUs and cores (cluster.shared_host_env).
        runs = cluster.run_nodes(argvs, env={**(env or {}), **cluster.shared_host_env(2, LINK)}, timeout=timeout)
        return TwoHosts(runs, nodes, [link_bytes(ns) for ns, _ in nodes])
