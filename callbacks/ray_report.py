"""`RayReportCallback`: metrics and checkpoints reach Ray Train through ``ray.train.report``.

Inside a Ray Train worker the Trainer adds it by default (see docs/ray.md); it reports on the
schedule of the run's first `ModelCheckpoint`: each time that callback has written a file, every
rank calls ``ray.train.report`` (Ray requires as many calls from every worker), rank 0 with the
file, the others without. The file is written once, by ModelCheckpoint; Ray copies it into its
storage (``RunConfig(storage_path=...)``, local or remote), where ``ray.train.get_checkpoint()``
hands it to the workers of a restart, which resume from it (`trainer.contracts.ray_worker`).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any

import torch

from callbacks.callback import Callback
from trainer.contracts import storage
from trainer.contracts.ray_worker import CHECKPOINT_ENTRY, ray_train_context

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView


class RayReportCallback(Callback):
    """Reports ``trainer.callback_metrics`` (plus ``epoch`` and ``step``) and the newest checkpoint
    to Ray Train each time the first `ModelCheckpoint` saves; without one, the metrics at every
    training epoch's end. Runs after the checkpoint callbacks (its role puts it there).

    It does nothing outside a Ray Train worker, and refuses to be built where Ray is not installed.
    """

    role = "ray_report"

    def __init__(self) -> None:
        try:
            import ray.train  # noqa: F401 - fail now, not at the first report
        except ImportError as err:
            raise ImportError(
                "RayReportCallback needs Ray Train: pip install 'lockstep-trainer[ray]' (or 'ray[train]')."
            ) from err
        self._reported: tuple[int, str] | None = None  # the checkpoint callback's save last reported

    def on_train_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        # a resumed fit starts from a save Ray already has
        checkpoint = _checkpoint_callback(trainer)
        self._reported = None if checkpoint is None else checkpoint.last_save

    def on_train_batch_end(
        self, trainer: TrainerView, pl_module: ModuleView, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._report_new_save(trainer)

    def on_validation_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if not trainer.sanity_checking:
            self._report_new_save(trainer)

    def on_train_epoch_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if _checkpoint_callback(trainer) is None:
            _report(trainer, None)
        else:
            self._report_new_save(trainer)

    def on_train_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        self._report_new_save(trainer)

    def _report_new_save(self, trainer: TrainerView) -> None:
        checkpoint = _checkpoint_callback(trainer)
        if checkpoint is None or self._reported is None:
            return
        save = checkpoint.last_save
        if save == self._reported or not save[1]:
            return
        self._reported = save
        _report(trainer, save[1])


def _checkpoint_callback(trainer: TrainerView) -> Any | None:
    found = trainer.checkpoint_callbacks
    return found[0] if found else None


def _report(trainer: TrainerView, path: str | None) -> None:
    """Every rank reports the metrics; rank 0 adds the file at ``path`` (None: metrics only)."""
    import ray.train

    if ray_train_context() is None:
        return
    metrics = _plain_metrics(trainer)
    if path is None or not trainer.is_global_zero:
        ray.train.report(metrics, checkpoint=None)
        return
    trainer.strategy.wait_for_checkpoint()  # an asynchronous save must be complete before Ray copies it
    staging = tempfile.mkdtemp(prefix="lockstep-ray-report-")
    try:
        _stage(path, os.path.join(staging, CHECKPOINT_ENTRY))
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(staging))
        # Ray registers a report when its controller next polls the workers, and a failure before
        # that loses it: a restart would resume from an older checkpoint. Waiting here makes the
        # reported checkpoint the one a restart resumes (one controller round trip per save).
        ray.train.get_all_reported_checkpoints(consistency_mode=ray.train.CheckpointConsistencyMode.COMMITTED)
    finally:  # Ray has copied it into its storage (a synchronous upload)
        shutil.rmtree(staging, ignore_errors=True)


def _stage(path: str, entry: str) -> None:
    """Put the checkpoint at ``path`` into Ray's staging directory without writing it again where
    possible: a hard link to the file (a copy across file systems, or of a sharded directory)."""
    if storage.is_url(path):
        with open(entry, "wb") as f:
            f.write(storage.read_bytes(path))
        return
    real = os.path.realpath(path)  # save_last="link": the file the link points to
    if os.path.isdir(real):
        shutil.copytree(real, entry)
        return
    try:
        os.link(real, entry)
    except OSError:
        shutil.copy2(real, entry)


def _plain_metrics(trainer: TrainerView) -> dict[str, Any]:
    """``callback_metrics`` as numbers (what Ray stores in its result), with the position."""
    metrics: dict[str, Any] = {}
    for name, value in trainer.callback_metrics.items():
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            metrics[name] = value.item()
        elif isinstance(value, (int, float)):
            metrics[name] = value
    metrics["epoch"] = trainer.current_epoch
    metrics["step"] = trainer.global_step
    return metrics
