"""The text part 8's GPT learns: Python's own documentation, read byte by byte.

Every CPython ships ``pydoc_data.topics``: the language reference's topics (``help("if")``,
``help("with")``, ...), about 465 kB of English. It needs no download, it is the same
text on every reader's machine, and bytes make the vocabulary 256 with no tokenizer.
"""
from __future__ import annotations

from functools import lru_cache

import torch

VOCAB = 256  # one token per byte value


@lru_cache(maxsize=1)
def corpus() -> bytes:
    """The topics joined in their names' order, as UTF-8 bytes."""
    from pydoc_data.topics import topics
    return "\n\n".join(topics[name] for name in sorted(topics)).encode("utf-8")


def tokens() -> torch.Tensor:
    """The corpus as token ids (int64), one per byte."""
    return torch.frombuffer(bytearray(corpus()), dtype=torch.uint8).long()


def split(val_fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, validation): the last ``val_fraction`` of the text is held out, unseen in training."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be between 0 and 1, got {val_fraction}")
    ids = tokens()
    cut = int(len(ids) * (1 - val_fraction))
    return ids[:cut], ids[cut:]


def batch(ids: torch.Tensor, batch_size: int, seq: int,
          generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random windows of ``seq`` tokens and, as targets, each shifted by one."""
    if batch_size < 1 or seq < 1:
        raise ValueError(f"batch_size and seq must be at least 1, got {batch_size} and {seq}")
    if len(ids) <= seq:
        raise ValueError(f"{len(ids)} tokens cannot hold a window of {seq} and its next token")
    starts = torch.randint(len(ids) - seq, (batch_size,), generator=generator)
    x = torch.stack([ids[i:i + seq] for i in starts.tolist()])
    y = torch.stack([ids[i + 1:i + 1 + seq] for i in starts.tolist()])
    return x, y


def batches(ids: torch.Tensor, batch_size: int, seq: int, steps: int, seed: int = 0,
            rank: int = 0, world_size: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` batches for one data-parallel rank: the global batch of ``batch_size·world_size``
    windows is drawn from ``seed`` alone, and rank r takes rows r, r+world_size, ... of it, so
    every world size trains on the same global batches."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside a world of {world_size}")
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        x, y = batch(ids, batch_size * world_size, seq, g)
        out.append((x[rank::world_size], y[rank::world_size]))
    return out


def decode(ids: torch.Tensor | list[int]) -> str:
    """Token ids back to text; a sampled byte sequence may cut a character, shown as U+FFFD."""
    values = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    return bytes(values).decode("utf-8", errors="replace")


def encode(text: str) -> torch.Tensor:
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)
