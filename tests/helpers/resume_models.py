"""A shuffled, dropout-using training run that checkpoint/resume tests interrupt and compare."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Sampler

from callbacks import Callback
from tests.helpers.models import QUIET, regression_data
from trainer import Trainer, TrainModule, seed_everything


class Noisy(TrainModule):
    """Dropout + AdamW + a per-step scheduler: every piece of state a resume must restore."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=0.01)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.7)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class StopAt(Callback):
    """Saves a checkpoint after global step ``step`` and then aborts the run, like a crash."""

    def __init__(self, step: int, path: str) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step and trainer.fit_loop.batches_done % trainer.accumulate_grad_batches == 0:
            trainer.save_checkpoint(self.path)
            raise KeyboardInterrupt("simulated crash")


class EvensThenOdds(Sampler[int]):
    """A sampler of the user's own that the Trainer keeps as it is (it rebuilds only torch's)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        return iter([*range(0, self.n, 2), *range(1, self.n, 2)])

    def __len__(self) -> int:
        return self.n


def make_loader(own_generator: bool = False, n: int = 96, batch_size: int = 4, own_sampler: bool = False) -> DataLoader:
    if own_sampler:
        return DataLoader(regression_data(n), batch_size=batch_size, sampler=EvensThenOdds(n))
    generator = torch.Generator().manual_seed(123) if own_generator else None
    return DataLoader(regression_data(n), batch_size=batch_size, shuffle=True, generator=generator)


def straight_and_resumed(
    tmp: str, stop_step: int, own_generator: bool = False, stop: str = "crash", own_sampler: bool = False,
    **trainer_kw: Any,
) -> tuple[list, list, int]:
    """Train 2 epochs straight; then stop at ``stop_step`` and resume. Returns both parameter lists.

    ``stop="crash"``: a callback saves after step ``stop_step`` and aborts the run.
    ``stop="max_steps"``: the first fit ends by ``max_steps=stop_step`` and
    ``trainer.save_checkpoint`` writes the checkpoint after it.
    """
    kw = {"max_epochs": 2, "accumulate_grad_batches": 2, "accelerator": "cpu", **QUIET, **trainer_kw}
    seed_everything(0)
    straight = Noisy()
    Trainer(**kw).fit(straight, make_loader(own_generator, own_sampler=own_sampler))

    seed_everything(0)
    first = Noisy()
    path = f"{tmp}/mid.ckpt"
    if stop == "crash":
        try:
            Trainer(**kw, callbacks=[StopAt(stop_step, path)]).fit(first, make_loader(own_generator, own_sampler=own_sampler))
        except KeyboardInterrupt:
            pass
    else:
        stopped = Trainer(**{**kw, "max_steps": stop_step})
        stopped.fit(first, make_loader(own_generator, own_sampler=own_sampler))
        stopped.save_checkpoint(path)
    seed_everything(99)  # a fresh process: nothing but the checkpoint decides what happens next
    resumed = Noisy()
    trainer = Trainer(**kw)
    trainer.fit(resumed, make_loader(own_generator, own_sampler=own_sampler), ckpt_path=path)
    return [p.detach().clone() for p in straight.parameters()], [p.detach().clone() for p in resumed.parameters()], trainer.global_step
