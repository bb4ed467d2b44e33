"""`OnExceptionCheckpoint`: save a checkpoint when fit raises (Lightning's)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from trainer.contracts import storage
from callbacks.callback import Callback
from trainer.contracts.arguments import check_path, hint_misspelled_arguments

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView


class OnExceptionCheckpoint(Callback):
    """Writes ``<dirpath>/<filename>.ckpt`` from ``on_exception`` (a crash, Ctrl-C), to resume from.

    Args:
        dirpath: The directory.
        filename: The name without ``.ckpt``.
    """

    FILE_EXTENSION = ".ckpt"

    @hint_misspelled_arguments
    def __init__(self, dirpath: str | os.PathLike[str], filename: str = "on_exception") -> None:
        check_path("OnExceptionCheckpoint(dirpath)", dirpath, allow_none=False)
        self.dirpath = storage.normalize(os.path.expanduser(os.fspath(dirpath)), "dirpath")
        self.filename = filename

    @property
    def ckpt_path(self) -> str:
        """Where the checkpoint is written."""
        return storage.join(self.dirpath, self.filename + self.FILE_EXTENSION)

    def on_exception(self, trainer: TrainerView, pl_module: ModuleView, exception: BaseException) -> None:
        if trainer.state.fn == "fit":  # only a fit has a run to resume
            trainer.save_checkpoint(self.ckpt_path)
