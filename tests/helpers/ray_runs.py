"""Training functions that Ray Train's workers run in tests/launch/test_ray.py (a module, so that
Ray's workers import them by name rather than unpickling a test's closure)."""
from __future__ import annotations

import contextlib
import io
import os
from typing import Any

import torch

from callbacks import Callback, ModelCheckpoint
from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import Trainer, seed_everything

N = 37  # odd: the ranks' shares and the last global batch are uneven
MICRO_BATCH, ACCUMULATE, EPOCHS = 4, 2, 2  # 2 workers: a global batch of 16, 3 steps per epoch


class _Fault(Callback):
    """Once per run (a marker file says it happened): kill rank ``rank`` with SIGKILL, or raise,
    when it reaches global step ``step`` (after that step's last micro batch)."""

    def __init__(self, how: str, rank: int, step: int, marker: str) -> None:
        self.how, self.rank, self.step, self.marker = how, rank, step, marker

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_rank != self.rank or trainer.global_step != self.step or os.path.exists(self.marker):
            return
        open(self.marker, "w").close()
        if self.how == "kill":
            os.kill(os.getpid(), 9)
        raise ValueError(f"planted failure at step {self.step}")


def fit_regression(config: dict[str, Any]) -> None:
    """One Ray Train worker: Lockstep's DDP on `Regression`, checkpoints every 2 steps; rank 0
    writes the final parameters and everything it printed to ``config["out"]``."""
    printed = io.StringIO()
    callbacks: list[Callback] = [ModelCheckpoint(every_n_train_steps=2, save_top_k=-1)]
    if config.get("fault"):
        how, rank, step = config["fault"]
        callbacks.insert(0, _Fault(how, rank, step, config["marker"]))
    with contextlib.redirect_stdout(printed):  # Ray's print patch tees into a redirected stdout
        seed_everything(0)
        module = Regression("sgd")
        trainer = Trainer(
            accelerator="cpu", strategy=config.get("strategy", "ddp"), max_epochs=EPOCHS,
            accumulate_grad_batches=ACCUMULATE, default_root_dir=config["root"], callbacks=callbacks,
            **dict(QUIET, enable_checkpointing=True),
        )
        trainer.fit(module, loader(regression_data(N), MICRO_BATCH, shuffle=True))
    if trainer.global_rank == 0:
        environment = trainer.strategy.cluster_environment
        torch.save({
            "params": [p.detach().clone() for p in module.parameters()],
            "global_step": trainer.global_step,
            "printed": printed.getvalue(),
            "source": environment.source,
            "world_size": environment.world_size,
            "reporters": [type(cb).__name__ for cb in trainer.callbacks],
        }, config["out"])


class _FullParams(Callback):
    """The full parameters at the end of training (FSDP's gathered while the group exists)."""

    params: list[torch.Tensor] = []

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self.params = [p.full_tensor() if hasattr(p, "full_tensor") else p.detach().clone() for p in module.parameters()]


def fit_strategies(config: dict[str, Any]) -> None:
    """One Ray Train worker: the run of `fit_regression` (no checkpoints) with ``allreduce``, then
    with ``fsdp``, in Ray's one process group; rank 0 writes each one's final parameters."""
    from torch import nn

    from trainer import FSDPStrategy

    outcome: dict[str, Any] = {}
    for name, strategy in (("allreduce", "allreduce"), ("fsdp", FSDPStrategy(auto_wrap_policy={nn.Linear}))):
        seed_everything(0)
        grab = _FullParams()
        trainer = Trainer(accelerator="cpu", strategy=strategy, max_epochs=EPOCHS, accumulate_grad_batches=ACCUMULATE,
                          default_root_dir=config["root"], callbacks=[grab], **QUIET)
        trainer.fit(Regression("sgd"), loader(regression_data(N), MICRO_BATCH, shuffle=True))
        outcome[name] = grab.params
        outcome[f"{name}-source"] = trainer.strategy.cluster_environment.source
    if trainer.global_rank == 0:
        torch.save(outcome, config["out"])
