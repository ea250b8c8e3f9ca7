"""A launch's stores listen on 127.0.0.1 alone: nothing of a notebook's job is reachable from the network.

A launch on one machine runs up to three TCPStore servers, each an unauthenticated key-value
store that any peer may read and write while the cell runs: the rendezvous's own (the agent's),
the one the ranks meet on at MASTER_PORT (the agent's too, by default), and, when the agent may
restart the job, a fresh one that each round's rank 0 serves at MASTER_PORT instead. torch binds
every one of them to every interface (``::``) whatever host name it is given: it has no
bind-address option. It does take a socket already bound (``master_listen_fd``), so this module
binds one to 127.0.0.1 and hands it over:

* ``BACKEND`` is torch's c10d rendezvous under another name, registered with the elastic agent,
  whose store and whose MASTER_PORT store are ``store()``'s;
* ``serve_master_port()`` in a restarted job's rank 0 starts MASTER_PORT's store the same way
  before the rank's own code runs. torch's rank 0 asks for a multi-tenant server on that port
  (``torch.distributed.rendezvous._create_c10d_store``), and a multi-tenant request reuses the
  server this process already runs on it, so the rank's group meets on the loopback one.

gloo (``GLOO_SOCKET_IFNAME``) and NCCL's bootstrap (``NCCL_SOCKET_IFNAME``) are pinned to the
loopback interface by the launcher; ``tests/test_launch.py`` reads every listening socket of a
running launch and fails on any beyond 127.0.0.1. The torchrun CLI (chapter 7.3) is torch's own.
"""
from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch.distributed as dist
from torch.distributed.elastic.rendezvous import RendezvousParameters, dynamic_rendezvous, rendezvous_handler_registry
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend

HOST = "127.0.0.1"
BACKEND = "helpers-loopback"  # LaunchConfig's rdzv_backend


def store(port: int = 0, timeout: timedelta = timedelta(seconds=60)) -> dist.TCPStore:
    """A TCPStore server listening on 127.0.0.1:``port`` alone (0: a port the OS picks; ``.port``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((HOST, port))
        server = dist.TCPStore(HOST, sock.getsockname()[1], is_master=True, multi_tenant=True,
                               wait_for_workers=False, timeout=timeout, master_listen_fd=sock.fileno())
    except BaseException:
        sock.close()
        raise
    sock.detach()  # the server owns the descriptor now, and closes it when it stops
    return server


class _Backend(C10dRendezvousBackend):
    """torch's c10d rendezvous backend under this module's name (the registry checks the name)."""

    @property
    def name(self) -> str:
        return BACKEND


def _handler(params: RendezvousParameters):
    """torch's c10d rendezvous handler (``registry._create_c10d_handler``), its stores on loopback."""
    own = store(timeout=timedelta(seconds=params.get_as_int("read_timeout", 60)))
    handler = dynamic_rendezvous.create_handler(own, _Backend(own, params.run_id), params)
    # Round 0's rank 0 serves MASTER_PORT's store from this method (DynamicRendezvousHandler).
    handler._create_tcp_store_server = lambda addr, port: store(port)
    handler.__class__ = _OneNodeHandler  # torch's create_handler builds the base class itself
    return handler


class _OneNodeHandler(dynamic_rendezvous.DynamicRendezvousHandler):
    """torch's handler without its first round's random wait of 0 to 0.3 s, which spreads many
    nodes' first joins apart: a launch has one node, and the wait was half a warm launch here
    (bench/launch.py). Its other waits (a second between polls of the store) stay. A subclass, not
    a wrapper stored on the handler: that would hold the handler, and its stores, in a cycle."""

    def next_rendezvous(self):
        wait = dynamic_rendezvous._delay
        dynamic_rendezvous._delay = lambda seconds: None if isinstance(seconds, tuple) else wait(seconds)
        try:
            return super().next_rendezvous()
        finally:
            dynamic_rendezvous._delay = wait


def _register() -> None:
    try:
        rendezvous_handler_registry.register(BACKEND, _handler)
    except ValueError:  # a reloaded module: its old handler stays, which does the same
        pass


_register()

_served: list[dist.TCPStore] = []  # kept for the rank's life: the multi-tenant server lives while one holds it


def serve_master_port() -> None:
    """In rank 0 of a job whose agent shares no store: serve MASTER_PORT on loopback before the rank's
    code asks torch for a server there. Other ranks, and jobs on the agent's store, have nothing to do."""
    if os.environ.get("RANK") != "0" or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return
    if os.environ.get("MASTER_ADDR") == HOST and os.environ.get("MASTER_PORT"):
        _served.append(store(int(os.environ["MASTER_PORT"])))
