"""Checkpoints under DDP that survive a crash, resume exactly, and refuse what they should.

The article's section 5.4 saves with ``torch.save(ckpt, path)`` on rank 0 and
loads with ``torch.load(path)`` on every rank. This module keeps that shape
and fixes it:

* **atomic**: write a temporary file in the same folder, fsync, ``os.replace``.
  A crash mid-write leaves the previous checkpoint whole (``atomic_save``);
* **safe**: ``torch.load(weights_only=True)``, because unpickling runs code,
  and ``map_location``, so each rank reads onto its own device (``read``);
* **collective**: rank 0 writes from ``model.module``; every rank loads only
  after a barrier, so nobody reads a file rank 0 is still writing;
* **complete**: model, optimizer, GradScaler, epoch, step, the sampler's
  position and every rank's RNG, so a resumed run repeats the uninterrupted
  one exactly (``save`` / ``load``, with ``ResumableSampler``);
* **checked**: a digest over every value catches bytes changed on disk, and
  a checkpoint of another model is rejected *before* anything is copied, so
  a bad file leaves the model, the optimizer and the file as they were.

Sharded checkpoints (each rank writes its own part, and a different number
of ranks can read them back) go through ``torch.distributed.checkpoint``:
``save_sharded`` / ``load_sharded``.
"""
from .atomic import atomic_save, latest, remove_stray_temp_files, stray_temp_files  # noqa: F401
from .ddp import Resume, load, model_mismatch, save  # noqa: F401
from .errors import (FORMAT, CheckpointError, CorruptCheckpoint, IncompatibleCheckpoint,  # noqa: F401
                     UnsafeCheckpoint)
from .read import digest, read, seal  # noqa: F401
from .resume import ResumableSampler  # noqa: F401
from ..devices import rng_state, set_rng_state  # noqa: F401
from .sharded import check_sharded, load_sharded, save_sharded  # noqa: F401
from ..training import unwrap  # noqa: F401
