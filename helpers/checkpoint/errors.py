"""What can be wrong with a checkpoint: one exception class per cause, and the format tag."""
from __future__ import annotations


FORMAT = "helpers.checkpoint/1"


class CheckpointError(RuntimeError):
    """A checkpoint could not be used. Nothing in memory or on disk was changed."""


class CorruptCheckpoint(CheckpointError):
    """The file is truncated, damaged, or its contents do not match the digest saved with them."""


class UnsafeCheckpoint(CheckpointError):
    """``weights_only=True`` refused the file: its pickle names a function or class to call."""


class IncompatibleCheckpoint(CheckpointError):
    """The checkpoint is whole but belongs to another model, optimizer or job layout."""
