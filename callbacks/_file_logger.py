"""Private base of the loggers that write under ``<save_dir>/<name>/version_N``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from callbacks._utils import (
    _check_path,
    _env_global_rank,
    _next_version,
    _validate_version,
    _version_dir_name,
)
from callbacks.logger import Logger

if TYPE_CHECKING:
    from trainer.module import TrainModule
    from trainer.trainer import Trainer


class _FileLogger(Logger):
    """Resolves ``save_dir``, ``name`` and ``version`` into ``log_dir`` the same way on every rank.

    ``version=None`` picks the next free ``version_N``. Global rank 0 picks it and broadcasts it
    in ``setup``: each rank scanning the directory itself would race with rank 0 creating it.
    """

    def __init__(
        self,
        save_dir: str | os.PathLike[str] | None = None,
        name: str | None = "logs",
        version: int | str | None = None,
    ) -> None:
        _validate_version(version)
        owner = type(self).__name__
        _check_path(owner, "save_dir", save_dir)
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{owner}(name={name!r}): expected None or a str.")
        self._save_dir = None if save_dir is None else os.fspath(save_dir)
        self._name = name or ""
        self._version = version
        self._rank: int | None = None

    # -- where ------------------------------------------------------------------------------
    @property
    def save_dir(self) -> str:
        """Root directory; the Trainer's ``default_root_dir`` unless given."""
        return self._save_dir if self._save_dir is not None else os.getcwd()

    @property
    def name(self) -> str:
        """Experiment name: the directory between ``save_dir`` and ``version_N``."""
        return self._name

    @property
    def root_dir(self) -> str:
        """``<save_dir>/<name>``: the directory that holds every version."""
        return os.path.join(self.save_dir, self._name)

    @property
    def version(self) -> int | str:
        """This run's version; before ``setup`` it is resolved locally (no rank agreement yet)."""
        if self._version is None:
            self._version = _next_version(self.root_dir)
        return self._version

    @property
    def log_dir(self) -> str:
        """``<save_dir>/<name>/version_N``: where this logger writes."""
        return os.path.join(self.root_dir, _version_dir_name(self.version))

    @property
    def is_global_zero(self) -> bool:
        return (self._rank if self._rank is not None else _env_global_rank()) == 0

    # -- hooks ------------------------------------------------------------------------------
    def setup(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        self._rank = trainer.global_rank
        if self._save_dir is None:
            self._save_dir = os.fspath(trainer.default_root_dir)
        version = self.version if trainer.is_global_zero else None
        if trainer.world_size > 1:
            version = trainer.strategy.broadcast(version, src=0)
        self._version = version
        if trainer.is_global_zero:
            # claim the version now, so a second run started in the same root gets the next one
            os.makedirs(self.log_dir, exist_ok=True)

    def _hparams_to_plain(self, params: Any) -> dict[str, Any]:
        """``params`` (a dict, Namespace or object with ``__dict__``) as a plain dict."""
        if params is None:
            return {}
        if not isinstance(params, dict):
            params = dict(vars(params)) if hasattr(params, "__dict__") else dict(params)
        return dict(params)
