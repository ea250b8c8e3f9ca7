"""helpers.checkpoint: atomic under SIGKILL, exact resume, resharding, and clear errors on bad input."""
import hashlib
import os
import random
import signal
import time

import pytest
import torch

import helpers
from helpers import checkpoint
from helpers.checkpoint import (CheckpointError, CorruptCheckpoint, IncompatibleCheckpoint,
                                ResumableSampler, UnsafeCheckpoint)
from helpers.article import article_save_checkpoint
from helpers.models import SimpleModel, simple_with_dropout
from helpers.probes import faults
from helpers.recipes import checkpointing as cp
from helpers.recipes import smoke

os.environ.setdefault("HELPERS_OFFLINE", "1")


def sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def snapshot(model, optimizer=None) -> dict:
    state = {k: v.clone() for k, v in model.state_dict().items()}
    if optimizer is not None:
        for i, s in optimizer.state_dict()["state"].items():
            state.update({f"opt{i}.{k}": v.clone() for k, v in s.items() if torch.is_tensor(v)})
    return state


def unchanged(before: dict, model, optimizer=None) -> bool:
    after = snapshot(model, optimizer)
    return before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


@pytest.fixture
def trained(tmp_path):
    """A model and optimizer one SGD step in, and a checkpoint of them."""
    torch.manual_seed(0)
    model = SimpleModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(8, 784)).sum().backward()
    optimizer.step()
    path = checkpoint.save(tmp_path / "step_000001.pt", model=model, optimizer=optimizer, step=1)
    return model, optimizer, path


# --- atomic writes ----------------------------------------------------------------------------

def test_previous_checkpoint_survives_20_kills_at_random_moments(tmp_path):
    path, rng = tmp_path / "ckpt.pt", random.Random(0)
    checkpoint.atomic_save(checkpoint.seal({"version": 0, "weights": torch.zeros(4)}), path)
    version = 0
    for _ in range(20):
        proc = faults.start_saver(path, megabytes=8, first=version + 1)
        deadline = time.monotonic() + 30
        while not checkpoint.stray_temp_files(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.001)  # the saver is up and writing
        time.sleep(rng.uniform(0, 0.3))
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        newer = faults.read_version(path)  # whole and unmixed, or this raises
        assert newer >= version
        version = newer
        checkpoint.remove_stray_temp_files(tmp_path)
    assert version > 1, "the saver never finished a save: the kills tested nothing"
    # Where a random kill lands depends on how long a write takes; the next test kills
    # mid-write by construction (it waits for a half-written temp file, and retries if the
    # write finished in between).


def test_kill_mid_write_breaks_torch_save_but_not_atomic_save(tmp_path):
    naive = faults.kill_mid_write(tmp_path / "naive.pt", atomic=False, megabytes=16)
    assert naive["file_bytes"] < naive["whole_bytes"]
    with pytest.raises(CorruptCheckpoint, match="truncated or corrupt"):
        faults.read_version(tmp_path / "naive.pt")
    for _ in range(3):
        atomic = faults.kill_mid_write(tmp_path / "atomic.pt", atomic=True, megabytes=16)
        assert atomic["temp_files"], "the kill should have left the unfinished temp file"
        assert faults.read_version(tmp_path / "atomic.pt") >= 1


def test_failed_save_leaves_previous_file_and_no_temp(trained, tmp_path):
    _, _, path = trained
    before = sha(path)
    with pytest.raises(Exception):
        checkpoint.atomic_save({"not picklable": lambda: None}, path)
    assert sha(path) == before and not checkpoint.stray_temp_files(tmp_path)


# --- exact resume -----------------------------------------------------------------------------

def test_resume_after_sigkill_matches_uninterrupted_run(tmp_path):
    cfg = dict(steps=30, save_every=8, nprocs=2, show=None)
    straight = helpers.launch(cp.train, str(tmp_path / "straight"), **cfg)[0]
    with pytest.raises(helpers.RankError, match="SIGKILL"):
        helpers.launch(cp.train, str(tmp_path / "run"), crash_at=19, **cfg)
    resumed = helpers.launch(cp.train, str(tmp_path / "run"), resume="exact", **cfg)[0]
    assert resumed["resumed_from"] == 16  # mid-epoch: 12 steps per epoch at 2 ranks
    assert len(resumed["losses"]) == len(straight["losses"]) == 30
    assert torch.allclose(torch.tensor(resumed["losses"]), torch.tensor(straight["losses"]),
                          rtol=0, atol=1e-6)
    for k, v in straight["state"].items():
        assert torch.allclose(resumed["state"][k], v, rtol=0, atol=1e-6), k


def test_sampler_resumes_mid_epoch_and_at_epoch_end():
    data = list(range(50))
    full = ResumableSampler(data, num_replicas=2, rank=1, seed=3)
    full.set_epoch(4)
    order = list(full)
    s = ResumableSampler(data, num_replicas=2, rank=1, seed=3)
    s.load_state_dict(full.state_dict(consumed=10))
    assert len(s) == 15 and list(s) == order[10:]
    assert len(s) == 25  # the next epoch is whole again
    s.load_state_dict(full.state_dict(consumed=25))
    assert s.epoch == 5 and len(list(s)) == 25
    with pytest.raises(IncompatibleCheckpoint, match="num_replicas"):
        ResumableSampler(data, num_replicas=4, rank=1, seed=3).load_state_dict(full.state_dict(0))


def test_load_restores_this_ranks_random_numbers(trained):
    model, optimizer, path = trained
    torch.manual_seed(1)
    checkpoint.save(path, model=model, optimizer=optimizer, step=1)
    expected = torch.rand(3)
    checkpoint.load(path, model=model, optimizer=optimizer)
    assert torch.equal(torch.rand(3), expected)


# --- sharded checkpoints ----------------------------------------------------------------------

def test_sharded_save_at_2_loads_at_1_and_4(tmp_path):
    folder = str(tmp_path / "step_3")
    saved = helpers.launch(cp.sharded_save, folder, nprocs=2, show=None)
    assert saved[0]["rows"]["fc.0.weight"] == 128 and "__1_0.distcp" in saved[0]["files"]
    ref = saved[0]
    for p, rows in ((1, 256), (4, 64)):
        got = helpers.launch(cp.sharded_load, folder, nprocs=p, show=None)
        assert [g["rows"]["fc.0.weight"] for g in got] == [rows] * p
        for k, v in ref["model"].items():
            assert torch.equal(got[0]["model"][k], v), (p, k)
        for k, s in ref["optimizer"].items():
            for name in ("exp_avg", "exp_avg_sq", "step"):
                assert torch.equal(got[0]["optimizer"][k][name], s[name]), (p, k, name)


def test_sharded_save_refuses_to_overwrite_and_load_needs_metadata(tmp_path):
    (tmp_path / "step_1").mkdir()
    with pytest.raises(FileExistsError):
        checkpoint.save_sharded(tmp_path / "step_1", SimpleModel())
    with pytest.raises(CorruptCheckpoint, match="no .metadata"):
        checkpoint.load_sharded(tmp_path / "step_1", SimpleModel())


# --- bad input: a clear error, and nothing lost -----------------------------------------------

def test_checkpoint_of_another_model_is_refused_before_anything_is_copied(trained):
    _, _, path = trained
    torch.manual_seed(5)
    other = simple_with_dropout(0.1)  # the same layers, but fc.2 is now fc.3
    optimizer = torch.optim.SGD(other.parameters(), lr=0.1)
    before, file_before = snapshot(other, optimizer), sha(path)
    with pytest.raises(IncompatibleCheckpoint, match="missing fc.3.weight.*Nothing was loaded"):
        checkpoint.load(path, model=other, optimizer=optimizer)
    head = SimpleModel()
    head.fc[2] = torch.nn.Linear(256, 5)  # same names, another shape: load_state_dict copies fc.0 first
    before_head = snapshot(head)
    with pytest.raises(IncompatibleCheckpoint, match=r"fc.2.weight: checkpoint \(10, 256\)"):
        checkpoint.load(path, model=head)
    assert unchanged(before, other, optimizer) and unchanged(before_head, head)
    assert sha(path) == file_before


def test_truncated_file_gives_clear_error_and_changes_nothing(trained, tmp_path):
    model, optimizer, path = trained
    cut = tmp_path / "cut.pt"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    garbled = tmp_path / "garbled.pt"  # whole zip, but its pickle has bytes that are no opcode
    raw = path.read_bytes()
    at = raw.find(b"optimizer")
    garbled.write_bytes(raw[:at - 8] + b"\xff" * 8 + raw[at:])
    before = snapshot(model, optimizer)
    for bad in (cut, empty, garbled):
        with pytest.raises(CorruptCheckpoint, match="truncated or corrupt|pickle does not parse"):
            checkpoint.load(bad, model=model, optimizer=optimizer)
    assert unchanged(before, model, optimizer)


def test_flipped_bytes_that_torch_load_accepts_are_caught_by_the_digest(trained, tmp_path):
    model, _, path = trained
    raw = bytearray(path.read_bytes())
    weight = model.state_dict()["fc.0.weight"].numpy().tobytes()
    at = raw.find(weight[:64]) + 4096  # inside fc.0.weight's stored bytes
    raw[at:at + 16] = bytes(16)
    bad = tmp_path / "flipped.pt"
    bad.write_bytes(bytes(raw))
    loaded = torch.load(bad, weights_only=True)  # torch itself does not notice
    assert not torch.equal(loaded["model"]["fc.0.weight"], model.state_dict()["fc.0.weight"])
    with pytest.raises(CorruptCheckpoint, match="do not match the digest"):
        checkpoint.read(bad)


def test_pickle_carrying_code_is_refused_and_does_not_run(tmp_path):
    marker = tmp_path / "ran.txt"
    path = faults.write_code_carrying_checkpoint(tmp_path / "evil.pt", marker)
    with pytest.raises(UnsafeCheckpoint, match="calls exec"):
        checkpoint.read(path)
    assert not marker.exists()
    torch.load(path, weights_only=False)  # proof the payload is real: unpickling runs it
    assert marker.exists()


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # DCP's own load, one process
def test_sharded_metadata_carrying_code_is_refused_and_does_not_run(tmp_path):
    import torch.distributed.checkpoint as dcp
    folder = tmp_path / "step_1"
    checkpoint.save_sharded(folder, SimpleModel())  # one process, no process group
    checkpoint.load_sharded(folder, SimpleModel())  # a good one loads
    marker = tmp_path / "ran.txt"
    faults.write_code_carrying_metadata(folder, marker)
    with pytest.raises(UnsafeCheckpoint, match="builtins.exec"):
        checkpoint.load_sharded(folder, SimpleModel())
    assert not marker.exists()
    with pytest.raises(dcp.CheckpointException):
        dcp.load({"model": SimpleModel().state_dict()}, checkpoint_id=folder)
    assert marker.exists(), "DCP's own loader unpickles .metadata without an allowlist"


def test_other_bad_inputs(trained, tmp_path):
    model, optimizer, path = trained
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        checkpoint.read(tmp_path / "missing.pt")
    article = tmp_path / "article.pt"
    article_save_checkpoint(model, optimizer, 3, article)
    with pytest.raises(IncompatibleCheckpoint, match="not written by helpers.checkpoint.save"):
        checkpoint.read(article)
    versions = tmp_path / "v.pt"
    checkpoint.atomic_save(checkpoint.seal({"version": 1}), versions)
    with pytest.raises(IncompatibleCheckpoint, match="not a training checkpoint"):
        checkpoint.load(versions, model=model)
    scaler = torch.amp.GradScaler("cpu", enabled=True)  # enabled here, absent from the file
    with pytest.raises(IncompatibleCheckpoint, match="GradScaler"):
        checkpoint.load(path, model=model, scaler=scaler)
    assert isinstance(IncompatibleCheckpoint("x"), CheckpointError)


def test_latest_picks_the_highest_step(tmp_path):
    for s in (2, 10, 9):  # unpadded: in alphabetical order step_9 would come last
        (tmp_path / f"step_{s}.pt").write_bytes(b"")
    (tmp_path / ".step_11.pt.abc.tmp").write_bytes(b"")
    assert sorted(p.name for p in tmp_path.glob("step_*.pt"))[-1] == "step_9.pt"
    assert checkpoint.latest(tmp_path).name == "step_10.pt"
    assert checkpoint.latest(tmp_path / "nothing") is None


def test_a_checkpoint_of_another_optimizer_is_refused_before_anything_is_copied(trained):
    model, _, path = trained  # saved with SGD and momentum
    adam = torch.optim.Adam(model.parameters(), lr=1e-3)
    before = snapshot(model, adam)
    with pytest.raises(IncompatibleCheckpoint, match="optimizer: checkpoint SGD, here Adam"):
        checkpoint.load(path, model=model, optimizer=adam)
    assert unchanged(before, model, adam)


def test_the_digest_of_a_set_is_the_same_in_every_process():
    """A set iterates in an order that depends on PYTHONHASHSEED; the digest must not."""
    import os
    import subprocess
    import sys
    code = ("from helpers.checkpoint import digest; "
            "print(digest({'extra': {'tags': {'alpha', 'beta', 'gamma', 'delta', 'epsilon'}}}))")
    digests = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "3")}
    assert len(digests) == 1, digests


def test_a_set_in_extra_round_trips_and_numpy_scalars_are_refused_at_save(tmp_path):
    import numpy as np
    model = SimpleModel()
    path = checkpoint.save(tmp_path / "ok.pt", model=model, extra={"tags": {"a", "b"}, "loss": 0.5})
    assert checkpoint.load(path, model=model).extra["tags"] == {"a", "b"}
    with pytest.raises(CheckpointError, match=r"extra\['loss'\] is a numpy.float64.*\.item\(\)"):
        checkpoint.save(tmp_path / "np.pt", model=model, extra={"loss": np.float64(0.5)})
    assert not (tmp_path / "np.pt").exists() and not checkpoint.stray_temp_files(tmp_path)


def test_rank0_failing_to_save_raises_on_every_rank_and_keeps_the_previous_file(tmp_path):
    path = tmp_path / "ckpt.pt"
    ranks = helpers.launch(smoke.save_fails_on_rank0, str(path), nprocs=2, show=None)
    assert all(r["error"] and "No space left on device" in r["error"] for r in ranks), ranks
    assert checkpoint.read(path)["step"] == 1 and not checkpoint.stray_temp_files(tmp_path)


def test_sharded_load_of_another_model_copies_nothing(tmp_path):
    folder = checkpoint.save_sharded(tmp_path / "step_1", SimpleModel())
    other = SimpleModel()
    other.fc[2] = torch.nn.Linear(256, 5)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(IncompatibleCheckpoint, match="Nothing was copied"):
        checkpoint.load_sharded(folder, other)
    assert all(torch.equal(before[k], v) for k, v in other.state_dict().items())


def test_sharded_checkpoint_with_corrupt_metadata_is_refused(tmp_path):
    folder = checkpoint.save_sharded(tmp_path / "step_1", SimpleModel())
    (folder / ".metadata").write_bytes(b"not a pickle at all")
    with pytest.raises(CorruptCheckpoint, match=".metadata is corrupt"):
        checkpoint.load_sharded(folder, SimpleModel())


def test_sharded_save_cleans_up_a_temp_folder_left_by_a_save_that_died(tmp_path):
    stale = tmp_path / ".step_1.tmp"
    stale.mkdir()
    (stale / "__0_0.distcp").write_bytes(b"half a shard")
    folder = checkpoint.save_sharded(tmp_path / "step_1", SimpleModel())
    assert not stale.exists() and (folder / ".metadata").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_1"]
