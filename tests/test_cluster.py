"""From one machine to a cluster (chapter 7.3): the torchrun commands, the SLURM script, and a real
two-node job on loopback that leaves nothing running."""
import json
import os
import subprocess

import psutil
import pytest

from helpers import cluster, netns, node_runs, plans, protocol
from helpers.recipes import multinode


def test_node_argv_differs_only_in_who_hosts_the_store():
    a, b = (cluster.torchrun_argv("multinode.whoami", nnodes=2, nproc=8, endpoint="h:29500", node=i,
                                  local_addr="10.0.0.1", args={"numel": 4}) for i in (0, 1))
    assert a[:11] == ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "--rdzv-backend", "c10d",
                      "--rdzv-endpoint", "h:29500", "--rdzv-id", "job"]
    assert [x for x, y in zip(a, b) if x != y] == ["is_host=1"]
    assert a[-5:] == ["-m", "helpers.run", "multinode.whoami", "--numel", "4"]
    cl = cluster.torchrun_argv("m.f", nnodes=4, nproc=8, endpoint="h:1")
    assert "--rdzv-conf" not in cl and "--local-addr" not in cl


def test_loopback_argvs_share_one_free_port():
    argvs = cluster.loopback_argvs("multinode.whoami", port=12345)
    ends = {a[a.index("--rdzv-endpoint") + 1] for a in argvs}
    assert ends == {"127.0.0.1:12345"} and [a[a.index("--rdzv-conf") + 1] for a in argvs] == ["is_host=1", "is_host=0"]
    assert 1024 <= cluster.free_port() <= 65535


def test_slurm_script_runs_the_built_argv():
    script = cluster.slurm_script("multinode.whoami", nodes=4, nproc=8, interface="eth0", args={"hold": 0})
    assert "#SBATCH --nodes=4" in script and "#SBATCH --ntasks-per-node=1" in script
    assert 'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)' in script
    assert "export GLOO_SOCKET_IFNAME=eth0" in script and "export NCCL_SOCKET_IFNAME=eth0" in script
    # written out by hand, not by the builder: a wrong builder cannot agree with itself here
    assert cluster.script_argv(script) == [
        "torchrun", "--nnodes", "4", "--nproc-per-node", "8", "--rdzv-backend", "c10d",
        "--rdzv-endpoint", "$head:29400", "--rdzv-id", "$SLURM_JOB_ID",
        "-m", "helpers.run", "multinode.whoami", "--hold", "0"]
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend
    assert '"$head:29400"' in script and cluster.RDZV_PORT == c10d_rendezvous_backend.DEFAULT_PORT == 29400


def _run_script(script: str, tmp_path) -> list[str]:
    """Run the sbatch script with bash, with stand-ins for scontrol and srun: srun prints its words."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "scontrol").write_text("#!/bin/sh\necho nodeA; echo nodeB\n")
    (bin_ / "srun").write_text('#!/bin/sh\nprintf "%s\\n" "$GLOO_SOCKET_IFNAME" "$@"\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "x"}
    done = subprocess.run(["bash", "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_the_slurm_script_expands_its_own_variables_and_nothing_from_its_arguments(tmp_path):
    evil = "$(touch pwned)`touch pwned2`;touch pwned3 '\""
    script = cluster.slurm_script("multinode.whoami", nodes=2, nproc=1, interface="eth0", args={"out_dir": evil})
    words = _run_script(script, tmp_path)
    assert words[0] == "eth0" and words[words.index("--rdzv-endpoint") + 1] == "nodeA:29400"
    assert words[words.index("--rdzv-id") + 1] == "77" and words[-2:] == ["--out_dir", evil]
    assert not list(tmp_path.glob("pwned*"))


@pytest.mark.parametrize("call, said", [
    (lambda: cluster.slurm_script("m.f", nodes=2, nproc=1, interface="eth0; rm -rf ~"), "interface"),
    (lambda: cluster.interface_env("$(id)"), "interface"),
    (lambda: cluster.slurm_script("m.f; id", nodes=2, nproc=1, interface="eth0"), "recipe"),
    (lambda: cluster.slurm_script("m.f", nodes=2, nproc=1, interface="eth0", args={"a b": 1}), "name"),
    (lambda: cluster.slurm_script("m.f", nodes=2, nproc=1, interface="eth0", port=70000), "port"),
    (lambda: cluster.torchrun_argv("m.f", nnodes=0, nproc=1, endpoint="h:1"), "nnodes"),
    (lambda: cluster.torchrun_argv("m.f", nnodes=2, nproc=0, endpoint="h:1"), "nproc"),
    (lambda: cluster.torchrun_argv("m.f", nnodes=2.0, nproc=1, endpoint="h:1"), "nnodes"),
    (lambda: cluster.torchrun_argv("m.f", nnodes=2, nproc=1, endpoint="h:1", node=2), "node"),
    (lambda: cluster.torchrun_argv("m.f", nnodes=2, nproc=1, endpoint="h:1", node=-1), "node"),
    (lambda: cluster.torchrun_argv("m.f", nnodes=2, nproc=1, endpoint="h:1", min_nodes=3), "min_nodes"),
    (lambda: cluster.torchrun_argv("m.f", nnodes=2, nproc=1, endpoint="h:1", min_nodes=0), "min_nodes"),
    (lambda: cluster.torchrun_argv("m.f", nnodes=2, nproc=1, endpoint="h:1", max_restarts=-1), "max_restarts"),
    (lambda: cluster.torchrun_argv("m.f", nnodes=2, nproc=1, endpoint="h:1",
                                   rdzv_conf={"join_timeout": "5,is_host=1"}), "rdzv_conf"),
    (lambda: cluster.standalone_argv("m.f", nproc=2, max_restarts=-2), "max_restarts"),
    (lambda: cluster.loopback_argvs("m.f", nnodes=2, min_nodes=5), "min_nodes"),
])
def test_the_builders_refuse_what_torchrun_or_the_shell_would_misread(call, said):
    with pytest.raises(ValueError, match=said):
        call()


def test_the_builders_accept_the_edges():
    argv = cluster.torchrun_argv("m.f", nnodes=2, nproc=1, endpoint="h:1", node=1, min_nodes=2, max_restarts=0,
                                 rdzv_conf={"last_call_timeout": 2})
    assert argv[argv.index("--rdzv-conf") + 1] == "is_host=0,last_call_timeout=2" and "--max-restarts" not in argv
    assert cluster.interface_env("enp0s31f6.100")["NCCL_SOCKET_IFNAME"] == "enp0s31f6.100"


@pytest.mark.parametrize("name, m", list(plans.PROFILES.items()), ids=list(plans.PROFILES))
def test_nodes_sharing_a_host_run_gloo_with_their_share_of_the_cores(name, m):
    env = cluster.shared_host_env(2, m=m)
    assert env[protocol.BACKEND] == "gloo" and env["GLOO_SOCKET_IFNAME"] == "lo"
    assert int(env[protocol.THREADS]) == max(1, m.cores // 2)  # not every core for each agent
    assert cluster.shared_host_env(4, "cl0", m)["NCCL_SOCKET_IFNAME"] == "cl0"


def test_the_job_run_nodes_reads_from_argvs_and_env():
    argvs = cluster.loopback_argvs("multinode.whoami", port=12345)
    assert cluster.host_job(argvs, {}) == plans.HostJob(2, 1, None)
    assert cluster.host_job(argvs, cluster.shared_host_env(2)) == plans.HostJob(2, 1, "gloo")
    one = cluster.standalone_argv("m.f", nproc=4, torchrun=cluster.TORCHRUN)
    assert cluster.host_job([one], {}) == plans.HostJob(1, 4, None)
    assert cluster.host_job([["sleep", "1"]], {}) is None  # not torchrun: nothing to place


def test_run_nodes_refuses_two_nccl_ranks_on_one_gpu_before_starting_anything(monkeypatch, nothing_left):
    gpu = plans.PROFILES["1 GPU + 16 cores"]
    monkeypatch.setattr(node_runs, "this_machine", lambda: gpu)
    monkeypatch.setattr(node_runs.subprocess, "Popen", lambda *a, **k: pytest.fail("a node was started"))
    with pytest.raises(RuntimeError, match="two NCCL ranks on one GPU"):
        cluster.run_nodes(cluster.loopback_argvs("multinode.whoami"), env=cluster.interface_env("lo"))
    with pytest.raises(pytest.fail.Exception, match="a node was started"):  # gloo: it would start them
        cluster.run_nodes(cluster.loopback_argvs("multinode.whoami"), env=cluster.shared_host_env(2, m=gpu))


def _children() -> set[int]:
    """This process's live descendants. A launch earlier in the session leaves its forkserver,
    so a test compares with what was there before it started."""
    alive = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.fixture
def nothing_left():
    before = _children()
    yield
    assert not _children() - before, "a node's processes were left running"


def test_two_nodes_on_loopback_and_nothing_left(tmp_path, nothing_left):
    argvs = cluster.loopback_argvs("multinode.whoami", args={"out_dir": str(tmp_path), "hold": 0.5,
                                                             "repeats": 2})
    runs = cluster.run_nodes(argvs, env={**cluster.shared_host_env(2), "HELPERS_TIMEOUT": "30"}, timeout=50)
    assert [r.returncode for r in runs] == [0, 0], [r.stdout[-2000:] for r in runs]
    recs = sorted((json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")), key=lambda r: r["rank"])
    assert [(r["rank"], r["group_rank"], r["local_rank"]) for r in recs] == [("0", "0", "0"), ("1", "1", "0")]
    assert all(r["sum"] == 3.0 and r["world_size"] == "2" for r in recs)
    listen = cluster.listening(runs)
    port = int(argvs[0][argvs[0].index("--rdzv-endpoint") + 1].split(":")[1])
    assert any(n == 0 and role == "agent" and p == port for n, role, _, p in listen), listen
    assert {ip for _, role, ip, _ in listen if role == "rank"} == {"127.0.0.1"}  # GLOO_SOCKET_IFNAME=lo


def test_a_node_past_its_timeout_is_killed_with_its_ranks(nothing_left):
    # one node of two: its rendezvous waits for a peer that never comes, until run_nodes kills it
    argv = cluster.loopback_argvs("multinode.whoami")[0]
    runs = cluster.run_nodes([argv], timeout=3)
    assert runs[0].returncode == -9
    assert all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
               for _, pid in runs[0].pids)


def test_a_node_killed_while_its_ranks_run_takes_them_with_it(nothing_left):
    """kill_tree's ranks: a one-node job whose two ranks hold their group for a minute."""
    argv = cluster.standalone_argv("multinode.whoami", nproc=2, torchrun=cluster.TORCHRUN, args={"hold": 60})
    runs = cluster.run_nodes([argv], env=cluster.shared_host_env(2), timeout=25)
    ranks = [pid for role, pid in runs[0].pids if role == "rank"]
    assert runs[0].returncode == -9 and len(ranks) >= 2, (runs[0].pids, runs[0].stdout[-2000:])
    assert not [pid for pid in ranks if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def test_recipe_runs_as_one_plain_process():
    r = multinode.whoami(repeats=1, numel=8)
    assert r["sum"] == 1.0 and r["all_reduce_s"] >= 0


@pytest.mark.skipif(bool(netns.why_not()), reason="needs root and ip netns")
def test_two_nodes_in_two_network_namespaces(tmp_path, nothing_left):
    """The same job, each node in its own network namespace with a 10.x address, over a veth pair:
    every rank socket is on the pair's addresses, and the all_reduce's bytes crossed the link."""
    numel = 1 << 14
    job = netns.two_hosts("multinode.whoami", timeout=50, env={"HELPERS_TIMEOUT": "30"},
                          args={"out_dir": str(tmp_path), "repeats": 2, "hold": 0.5, "numel": numel})
    assert [r.returncode for r in job.runs] == [0, 0], [r.stdout[-2000:] for r in job.runs]
    head, addresses = job.nodes[0][1], {addr for _, addr in job.nodes}
    recs = sorted((json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")), key=lambda r: r["rank"])
    assert [r["sum"] for r in recs] == [3.0, 3.0] and {r["master_addr"] for r in recs} == {head}
    talked = {(ip, rip) for r in job.runs for role, _, status, ip, _, rip, _ in r.sockets
              if role == "rank" and status == "ESTABLISHED"}
    assert talked and {a.removeprefix("::ffff:") for pair in talked for a in pair} <= addresses, talked
    assert all(link["rx"] >= 4 * numel and link["tx"] >= 4 * numel for link in job.link), job.link
    assert not set(netns.namespaces()) & {ns for ns, _ in job.nodes}


def test_the_chapters_sentences_follow_the_machines_facts():
    from helpers import sentences
    s = sentences.cluster("box", {"lo": ["127.0.0.1"], "eth0": ["10.1.2.3"]}, "not root")
    assert "box" in s["cl_interfaces"] and "eth0 (10.1.2.3)" in s["cl_interfaces"]
    assert "cannot" in s["cl_namespaces"] and "not root" in s["cl_namespaces"]
    alone = sentences.cluster("b", {"lo": ["127.0.0.1"]}, "")
    assert "loopback alone" in alone["cl_interfaces"] and "can make" in alone["cl_namespaces"]
