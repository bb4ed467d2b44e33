"""Private base of the loggers that write under ``<save_dir>/<name>/version_N``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

from callbacks._utils import RUN_FILE, _next_version, _validate_version, _version_dir_name, _version_of_run
from callbacks.logger import Logger
from trainer.contracts.arguments import check_path, check_path_component
from trainer.contracts import storage
from trainer.contracts.run_identity import run_id

if TYPE_CHECKING:
    from trainer.contracts.protocols import LoggerView, ModuleView, TrainerView


class _FileLogger(Logger):
    """Resolves ``save_dir``, ``name`` and ``version`` into ``log_dir`` the same way on every rank.

    ``version=None`` picks the next free ``version_N``: see `fix_log_versions`. Later calls
    of the same Trainer (``validate``/``test`` after ``fit``) keep it.
    """

    # no defaults here: each public logger's signature has them (Lightning's), and passes all four
    def __init__(
        self, save_dir: str | os.PathLike[str] | None, name: str | None, version: int | str | None, prefix: str
    ) -> None:
        _validate_version(version)
        owner = type(self).__name__
        check_path(f"{owner}(save_dir)", save_dir)
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{owner}(name={name!r}): expected None or a str.")
        # each is one directory under save_dir: a config file naming '../x' or '/abs' must not lead out of it
        if name:
            check_path_component(f"{owner}(name)", name)
        if isinstance(version, str):
            check_path_component(f"{owner}(version)", version)
        if not isinstance(prefix, str):
            raise TypeError(f"{owner}(prefix={prefix!r}): expected a str.")
        self._prefix = prefix
        self._save_dir = None if save_dir is None else storage.normalize(save_dir, "save_dir")
        self._name = name or ""
        self._version = version
        self._picks_version = version is None
        self._version_fixed = False  # set once, by `fix_log_versions`
        self._made_version_dir = self._made_root_dir = False  # by this run: removed again if left empty
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
        return storage.join(self.save_dir, self._name)

    @property
    def version(self) -> int | str:
        """This run's version; before ``setup`` it is resolved locally (no rank agreement yet)."""
        if self._version is None:
            self._version = _next_version(self.root_dir)
        return self._version

    @property
    def version_dir(self) -> str:
        """``<save_dir>/<name>/version_N``: this run's directory (the default checkpoints go below it)."""
        return storage.join(self.root_dir, _version_dir_name(self.version))

    @property
    def log_dir(self) -> str:
        """Where this logger writes: `version_dir`."""
        return self.version_dir

    def _default_save_dir(self, directory: str) -> None:
        """Write under ``directory`` unless a ``save_dir`` was given."""
        if self._save_dir is None:
            self._save_dir = directory

    def _fix_version(self, version: int | str | None) -> None:
        """The version every rank agreed on (see `fix_log_versions`)."""
        self._version = version
        self._version_fixed = True

    # -- hooks ------------------------------------------------------------------------------
    def setup(self, trainer: TrainerView, pl_module: ModuleView, stage: str) -> None:
        self._rank = trainer.global_rank
        if not self._version_fixed:
            restart = trainer.strategy.is_restart()  # every rank asks: it may be a collective
            fix_log_versions(trainer, [self, *trainer.loggers], broadcast=trainer.world_size > 1, restart=restart)
        if trainer.is_global_zero:
            # claim the version now, so a second run started in the same root gets the next one
            local = not storage.is_url(self.version_dir)
            self._made_version_dir = local and not os.path.exists(self.version_dir)
            self._made_root_dir = local and not os.path.exists(self.root_dir)
            storage.makedirs(self.log_dir)
            if self._picks_version and not storage.exists(storage.join(self.version_dir, RUN_FILE)):
                storage.write_bytes(storage.join(self.version_dir, RUN_FILE), run_id().encode())

    # -- the flush policy of the file loggers ------------------------------------------------
    # Loggers run before the other callbacks: what was logged so far is on disk for their
    # epoch-end hooks; the epoch aggregates follow with `save()` once they are published.
    def on_train_epoch_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        self.save()

    def on_validation_epoch_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        self.save()

    def on_exception(self, trainer: TrainerView, pl_module: ModuleView, exception: BaseException) -> None:
        self._after_failure()
        self._remove_empty_version_dir()

    def teardown(self, trainer: TrainerView, pl_module: ModuleView, stage: str) -> None:
        self.save()
        self._remove_empty_version_dir()  # a resume that trained nothing leaves no empty version_N

    def _after_failure(self) -> None:
        """What is buffered is written (a logger may close its files instead)."""
        self.save()

    def _remove_empty_version_dir(self) -> None:
        """After a failure or a fit that trained nothing: the ``version_N`` (and ``<name>``) this run
        created go again if nothing was written in them (only empty directories are removed; a file anywhere below keeps it all)."""
        if not self._made_version_dir:
            return
        run_file = os.path.join(self.version_dir, RUN_FILE)
        if os.path.isfile(run_file) and os.listdir(self.version_dir) == [RUN_FILE]:
            os.remove(run_file)  # the claim alone is nothing written
        made = sorted((d for d, _, _ in os.walk(self.version_dir)), key=len, reverse=True)
        for directory in made + ([self.root_dir] if self._made_root_dir else []):
            try:
                os.rmdir(directory)  # fails, and keeps it, unless empty
            except OSError:
                pass
        self._made_version_dir = False


def fix_log_versions(trainer: TrainerView, loggers: Sequence[LoggerView], broadcast: bool, restart: bool = False) -> None:
    """Fix ``save_dir`` and version of each file logger in ``loggers`` whose version is not fixed.

    The loggers that pick their version share one, the next number free in all their
    directories, so a TensorBoard and a CSV logger of one Trainer write to the same
    ``version_N``. Global rank 0 decides; with ``broadcast`` one broadcast tells every rank (each
    rank scanning the directories itself would race with rank 0 creating them). The first
    ``setup`` calls it; so does a launching process before it spawns its workers
    (``ddp_spawn``), which then all inherit one version for every call of the Trainer.

    A ``restart`` of the job (SLURM requeue, an elastic restart) writes on in the newest
    version this run wrote (its run file names the run): it resumes from that version's last
    checkpoint, and one job is one run in TensorBoard. A restart of a run that had not written a
    version yet takes the next free one, never another run's.
    """
    group = _unfixed(loggers)
    if not group:
        return
    for lg in group:
        lg._default_save_dir(os.fspath(trainer.default_root_dir))
    versions: list[int | str | None] = []
    if trainer.is_global_zero or not broadcast:
        versions = _decide_versions(group, restart)
    if broadcast:
        versions = trainer.strategy.broadcast(versions, src=0)
    for lg, version in zip(group, versions):
        lg._fix_version(version)


def _unfixed(loggers: Sequence[LoggerView]) -> list[_FileLogger]:
    """The file loggers whose version is still open, each once (one may be passed twice)."""
    group: list[_FileLogger] = []
    for lg in loggers:
        if isinstance(lg, _FileLogger) and not lg._version_fixed and lg not in group:
            group.append(lg)
    return group


def _decide_versions(group: list[_FileLogger], restart: bool) -> list[int | str | None]:
    """Rank 0's choice: one shared version for the loggers that pick theirs, the given one for the rest."""
    pickers = [lg for lg in group if lg._picks_version]
    shared = max((_next_version(lg.root_dir) for lg in pickers), default=0)
    if restart:
        own = [v for v in (_version_of_run(lg.root_dir, run_id()) for lg in pickers) if v is not None]
        shared = max(own) if own else shared
    return [shared if lg._picks_version else lg._version for lg in group]
