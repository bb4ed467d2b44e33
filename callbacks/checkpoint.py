"""`Checkpoint`: the base class of checkpoint callbacks (Lightning's), found by their role."""

from __future__ import annotations

from callbacks.callback import Callback


class Checkpoint(Callback):
    """A callback that writes checkpoints; `ModelCheckpoint` is one. A subclass of your own is
    treated as the run's checkpoint callback (``trainer.checkpoint_callbacks``)."""

    role = "checkpoint"
