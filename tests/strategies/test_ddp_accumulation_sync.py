"""DDP + gradient accumulation: one gradient all-reduce per optimizer step, counted by a comm hook.

Each rank trains 7 micro batches per epoch with A=3 (windows 3, 3, 1). DDP runs its comm hook once
per bucket and synced backward; with one bucket (a huge ``bucket_cap_mb``), the hook's calls are
the all-reduce rounds. They must happen exactly at the backward passes that end a window (3rd,
6th, 7th of every epoch): micro batches inside a window run under ``no_sync``.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET, Regression, assert_params_close, loader, params_of, regression_data

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(120)]

EPOCHS, ACCUMULATE, MICRO_BATCH = 2, 3, 2
SAMPLES = 28  # 14 per rank: 7 micro batches per rank per epoch


class _Record:
    """The hook's state: what happened, in order."""

    def __init__(self) -> None:
        self.backward = 0  # backward passes started so far
        self.rounds: list[tuple[int, int, bool]] = []  # (backward pass, bucket index, last bucket)
        self.steps: list[int] = []  # backward pass after which the optimizer stepped


def _counting_allreduce(state, bucket):  # no annotations: DDP rejects any but the real types
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    state.rounds.append((state.backward, bucket.index(), bucket.is_last()))
    return allreduce_hook(None, bucket)  # the default all-reduce (mean), on the default group


class _Counted(Regression):
    def __init__(self, record: _Record) -> None:
        super().__init__("sgd")
        self.record = record

    def on_before_backward(self, loss: torch.Tensor) -> None:
        self.record.backward += 1

    def on_after_backward(self) -> None:
        self.after_backward = getattr(self, "after_backward", 0) + 1

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self.record.steps.append(self.record.backward)


def _train_with_counting_hook(rank: int, world_size: int) -> dict[str, Any]:
    from trainer import DDPStrategy, Trainer

    record = _Record()
    strategy = DDPStrategy(bucket_cap_mb=1000, ddp_comm_hook=_counting_allreduce, ddp_comm_state=record)
    trainer = Trainer(accelerator="cpu", max_epochs=EPOCHS, accumulate_grad_batches=ACCUMULATE, strategy=strategy, **QUIET)
    module = _Counted(record)
    trainer.fit(module, loader(regression_data(SAMPLES), MICRO_BATCH))
    return {
        "backward": module.after_backward,
        "rounds": record.rounds,
        "steps": record.steps,
        "global_step": trainer.global_step,
        "num_training_batches": trainer.num_training_batches,
        "params": params_of(module),
    }


def test_one_allreduce_per_optimizer_step_including_the_short_last_window():
    results = run_ranks(_train_with_counting_hook, init_group=False, timeout=90)
    window_ends = [e * 7 + i for e in range(EPOCHS) for i in (3, 6, 7)]  # 3, 6, 7, 10, 13, 14
    for r in results:
        assert r["num_training_batches"] == 7
        assert r["backward"] == 7 * EPOCHS
        assert r["global_step"] == 3 * EPOCHS
        assert r["steps"] == window_ends
        # one bucket, one all-reduce round per optimizer step, during the window's last backward
        assert r["rounds"] == [(n, 0, True) for n in window_ends]

    # The synced gradients are right: one process with the global micro batch 2 * 2 and the same
    # windows (3, 3, 1) ends with the same parameters.
    reference = Regression("sgd")
    from trainer import Trainer

    Trainer(accelerator="cpu", max_epochs=EPOCHS, accumulate_grad_batches=ACCUMULATE, **QUIET).fit(
        reference, loader(regression_data(SAMPLES), 2 * MICRO_BATCH)
    )
    for r in results:
        assert_params_close(r["params"], params_of(reference), atol=1e-5)
