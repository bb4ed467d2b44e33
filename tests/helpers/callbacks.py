"""Modules, callbacks and readers shared by the callback and logger tests."""

from __future__ import annotations

import glob
import os
from typing import Any, Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from callbacks import Callback
from trainer import TrainModule


def data(n: int = 32, features: int = 3, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


def loader(n: int = 32, batch_size: int = 8, seed: int = 0) -> DataLoader:
    return DataLoader(data(n, seed=seed), batch_size=batch_size)


class Scripted(TrainModule):
    """A linear regressor whose monitored metrics follow a script, one value per epoch.

    ``val_script[epoch]`` is logged as ``val_metric`` in validation and ``train_script[epoch]``
    as ``train_metric`` (epoch mean of a constant) in training. ``per_rank`` scripts are indexed
    by ``[rank][epoch]``. ``fail_at_step`` raises in ``training_step`` once that many optimizer
    steps are done.
    """

    def __init__(
        self,
        val_script: Sequence[Any] | None = None,
        train_script: Sequence[Any] | None = None,
        lr: float = 0.01,
        fail_at_step: int | None = None,
        prog_bar: bool = False,
        scheduler: str | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters("lr")
        torch.manual_seed(0)
        self.net = nn.Linear(3, 1)
        self.val_script = val_script
        self.train_script = train_script
        self.lr = lr
        self.fail_at_step = fail_at_step
        self.prog_bar = prog_bar
        self.scheduler = scheduler

    def _scripted(self, script: Sequence[Any]) -> float:
        value = script[self.current_epoch]
        if isinstance(value, (list, tuple)):  # per-rank script
            value = value[self.global_rank]
        return float(value)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.fail_at_step is not None and self.global_step >= self.fail_at_step:
            raise RuntimeError(f"training_step failed on purpose at step {self.global_step}")
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=self.prog_bar)
        if self.train_script is not None:
            self.log("train_metric", self._scripted(self.train_script), on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y), prog_bar=self.prog_bar)
        if self.val_script is not None:
            self.log("val_metric", self._scripted(self.val_script))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        if self.scheduler == "epoch":
            return {
                "optimizer": optimizer,
                "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5),
            }
        if self.scheduler == "step":
            sched = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.9)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
        return optimizer


class Recorder(Callback):
    """Records the hooks it sees (name, epoch, global step) and the exception, if any."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []
        self.exception: BaseException | None = None

    def _note(self, name: str, trainer: Any) -> None:
        self.calls.append((name, trainer.current_epoch, trainer.global_step))

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self._note("on_train_epoch_end", trainer)

    def on_validation_end(self, trainer: Any, module: Any) -> None:
        self._note("on_validation_end", trainer)

    def on_exception(self, trainer: Any, module: Any, exception: BaseException) -> None:
        self._note("on_exception", trainer)
        self.exception = exception

    def optimizer_steps_per_epoch(self) -> list[int]:
        steps = [step for name, _, step in self.calls if name == "on_train_epoch_end"]
        return [b - a for a, b in zip([0] + steps[:-1], steps)]


def event_files(root: str | os.PathLike[str]) -> list[str]:
    """Every TensorBoard event file under ``root``."""
    return sorted(glob.glob(os.path.join(os.fspath(root), "**", "events.out.tfevents.*"), recursive=True))


def read_event_dir(log_dir: str | os.PathLike[str]) -> Any:
    """An ``EventAccumulator`` loaded from ``log_dir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(os.fspath(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def scalars(log_dir: str | os.PathLike[str]) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` for every scalar in ``log_dir``'s event files."""
    acc = read_event_dir(log_dir)
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
