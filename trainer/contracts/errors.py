"""Error types that several parts raise or recognise (the loops raise them, the launcher names the
rank they came from), so they live on the floor every part imports."""
from __future__ import annotations


class CheckpointError(RuntimeError):
    """A checkpoint file could not be read or does not fit this run."""


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite.

    ``rank`` is the rank whose loss it was (None: this process's own). Every rank raises it after the
    save-time check, so on the other ranks it is about a peer, and their failure is a consequence.
    """

    def __init__(self, message: str, rank: int | None = None) -> None:
        super().__init__(message)
        self.rank = rank

    def __reduce__(self) -> tuple[type[BaseException], tuple[str, int | None]]:  # picklable with its rank (spawned workers hand errors back)
        return (type(self), (str(self), self.rank))


class NonFiniteGradientError(FloatingPointError):
    """A gradient became NaN or infinite."""


class MonitorKeyError(KeyError):
    """A callback's ``monitor`` (``ModelCheckpoint``, ``EarlyStopping``) is not among the logged metrics.

    A ``KeyError``, so ``except KeyError`` catches it, with the message as written (``KeyError``
    quotes its message, which garbles the list of available keys).
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
