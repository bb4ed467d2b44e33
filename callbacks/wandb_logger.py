"""`WandbLogger`: metrics and hyperparameters to Weights & Biases, online or offline."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from callbacks._extras import require_extra
from callbacks._utils import _flat_metrics
from callbacks.logger import Logger
from callbacks.service_timeout import check_timeout_args, unreachable
from trainer.contracts.arguments import (
    check_bool, check_path, check_path_component, check_str, hint_misspelled_arguments,
)
from trainer.contracts import storage

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView


class WandbLogger(Logger):
    """Logs to W&B (extra ``wandb``) from global rank 0 only.

    Args:
        name: Display name of the run (W&B picks one when ``None``).
        save_dir: Local directory of W&B's files (its ``wandb/`` folder goes there); default: the
            Trainer's ``default_root_dir`` (the current directory when that is a URL).
        version: Same as ``id`` (Lightning's name for it).
        offline: Write the run to ``<save_dir>/wandb/offline-run-*`` only, with no network
            access; upload it later with ``wandb sync``. ``WANDB_MODE=offline`` does the same.
        dir: Same as ``save_dir`` (used when ``save_dir`` is not given).
        id: Resume the W&B run with this id (a new run when ``None``).
        project: W&B project.
        prefix: Put in front of every metric key, joined with ``-`` (``"train-loss"``).
        entity: W&B team or user.
        tags: Tags of the run.
        timeout: Seconds W&B has to start the run (``wandb.Settings(init_timeout=...)``).
        on_unreachable: ``"raise"``: a W&B server that does not answer in time fails the run
            (`ServiceUnreachableError`); ``"warn"``: a warning, and
            the run is logged offline instead (``wandb sync`` uploads it later).

    The run starts at the first thing logged. Its id is saved in every checkpoint, so a fit
    resumed from one with a new ``WandbLogger`` continues the same run (``resume="allow"``).
    Metrics are logged with ``step`` = the optimizer step; hyperparameters go to the run's
    config. Each Trainer call ends with ``finish``; a later call of the same Trainer resumes the run.
    """

    @hint_misspelled_arguments
    def __init__(
        self,
        name: str | None = None,
        save_dir: str | os.PathLike[str] | None = None,
        version: str | None = None,
        offline: bool = False,
        dir: str | os.PathLike[str] | None = None,
        id: str | None = None,
        project: str = "lockstep",
        prefix: str = "",
        entity: str | None = None,
        tags: Sequence[str] | None = None,
        timeout: float = 90.0,
        on_unreachable: str = "raise",
    ) -> None:
        require_extra("wandb", "WandbLogger")
        check_path("WandbLogger(save_dir)", save_dir)
        check_path("WandbLogger(dir)", dir)
        check_bool("WandbLogger(offline)", offline)
        check_str("WandbLogger(prefix)", prefix)
        # the run id is part of W&B's run directory name under save_dir
        check_path_component("WandbLogger(version)", version, allow_none=True)
        check_path_component("WandbLogger(id)", id, allow_none=True)
        save_dir = save_dir if save_dir is not None else dir
        id = id if id is not None else version
        self._prefix = prefix
        self.project = project
        self.name = name
        self.offline = offline
        self.entity = entity
        self.tags = list(tags) if tags else None
        self.timeout = check_timeout_args("WandbLogger", timeout, on_unreachable)
        self.on_unreachable = on_unreachable
        if save_dir is not None and "://" in os.fspath(save_dir):
            raise ValueError(
                f"WandbLogger(save_dir={os.fspath(save_dir)!r}): W&B keeps its run files on a local disk; "
                "pass a local directory."
            )
        self._save_dir = None if save_dir is None else os.fspath(save_dir)
        self._id = id
        self._run: Any = None
        self._rank: int | None = None

    @property
    def save_dir(self) -> str:
        """Where W&B's local files go."""
        return self._save_dir if self._save_dir is not None else os.getcwd()

    @property
    def log_dir(self) -> str | None:
        """The run's local directory, once it has started."""
        return self._run.dir if self._run is not None else None

    @property
    def id(self) -> str | None:
        """The W&B run id (None before the run starts)."""
        return self._run.id if self._run is not None else self._id

    @property
    def experiment(self) -> Any:
        """The ``wandb`` run (started on first use)."""
        if self._run is None:
            import wandb

            os.makedirs(self.save_dir, exist_ok=True)
            kwargs: dict[str, Any] = {
                "project": self.project, "name": self.name, "dir": self.save_dir, "id": self._id,
                "entity": self.entity, "tags": self.tags, "resume": "allow" if self._id is not None else None,
                "reinit": "create_new", "settings": wandb.Settings(init_timeout=self.timeout),
            }
            if self.offline:
                self._run = wandb.init(mode="offline", **kwargs)
            else:
                try:
                    self._run = wandb.init(**kwargs)
                except wandb.errors.Error as err:  # not answering within init_timeout, or refused
                    problem = str(err).splitlines()[0]
                    unreachable("WandbLogger", "the W&B server", self.timeout, problem, self.on_unreachable,
                                f"Logging offline to {self.save_dir} instead (`wandb sync` uploads it later).")
                    self._run = wandb.init(mode="offline", **kwargs)
            self._id = self._run.id
        return self._run


    # -- Logger API -------------------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Log the metrics at ``step`` (a dict of scalars as ``key/sub_key``)."""
        step = 0 if step is None else step  # the Trainer always gives one; a direct call may not
        if not self.is_global_zero:
            return
        flat = _flat_metrics(metrics, self._prefix)
        self.experiment.log(flat, step=int(step))

    def log_hyperparams(self, params: Any) -> None:
        """Add ``params`` to the run's config."""
        if not self.is_global_zero:
            return
        self.experiment.config.update(self._hparams_to_plain(params), allow_val_change=True)

    def log_text(self, tag: str, text: str) -> None:
        """Put ``text`` in the run's summary under ``tag``."""
        if not self.is_global_zero:
            return
        self.experiment.summary[tag] = text

    def finalize(self, status: str) -> None:
        """Finish the run (exit code 1 when the call failed)."""
        if self._run is None:
            return
        self._run.finish(exit_code=0 if status == "success" else 1)
        self._run = None  # a later call resumes the same id

    # -- resume -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The run id, so a resumed fit continues the same run."""
        return {"id": self.id, "project": self.project}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Adopt the checkpoint's run id, unless this logger has one already."""
        if self._id is None and self._run is None and state_dict.get("project") == self.project:
            self._id = check_path_component("WandbLogger: the checkpoint's state entry 'id'", state_dict.get("id"),
                                            allow_none=True)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_run": None}  # each spawned worker starts (or resumes) its own

    # -- hooks ------------------------------------------------------------------------------
    def setup(self, trainer: TrainerView, pl_module: ModuleView, stage: str) -> None:
        self._rank = trainer.global_rank
        if self._save_dir is None and not storage.is_url(trainer.default_root_dir):
            self._save_dir = os.fspath(trainer.default_root_dir)  # a URL root: the current directory
