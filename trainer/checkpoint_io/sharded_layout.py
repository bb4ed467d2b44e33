"""The layout of a sharded checkpoint: every rank writes its own shards into one directory (`torch.distributed.checkpoint`).

A sharded checkpoint is a directory named like the file would be (``epoch=1-step=8.ckpt/``):

- ``__<rank>_0.distcp``: each rank's shards of the module and optimizer tensors;
- ``.metadata``: torch's index of them (the global shape of every tensor, which file holds which slice);
- ``meta.pt``: everything else a checkpoint holds (position, RNG states, callbacks, hyperparameters,
  scheduler states, the optimizers' hyperparameters), one ``torch.save`` file that
  ``torch.load(weights_only=True)`` reads;
- ``shards.json``: the size and SHA-256 of every other file, written when the save completes.
  A load checks every shard against it (and against the sizes in the index) before it touches
  the module or an optimizer, so a truncated or corrupted checkpoint fails with a
  `CheckpointError` naming the shard and the rank that wrote it, and the model stays as it was.

It is complete or absent: the ranks write into a hidden sibling (``.<name>.tmp-<token>``), and
global rank 0 renames it to ``<name>`` only after every rank's shards are written. Loading
reshards: each rank reads the slices its own shards need, whatever the world size that wrote them.
`consolidate_checkpoint` turns such a directory into one ordinary checkpoint file (one process, no
process group).
"""
from __future__ import annotations

import os

from trainer.contracts import storage

META_FILE = "meta.pt"
INDEX_FILE = ".metadata"  # written by torch.distributed.checkpoint once every rank's shards are
MANIFEST_FILE = "shards.json"  # every other file's size and SHA-256, written when the save completes
# The checkpoint entries whose tensors are sharded: written by every rank, not in meta.pt.
SHARDED_KEYS = ("state_dict", "optimizer_states")


def is_sharded_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a complete sharded checkpoint directory."""
    path = os.fspath(path)
    return storage.isdir(path) and storage.isfile(storage.join(path, META_FILE))
