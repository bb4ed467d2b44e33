"""Two failure paths that used to hang every rank until the process-group timeout (30 minutes):

- a rank whose loader yields fewer batches than its ``len()`` announced (training and evaluation);
- a rank that raises while an ``on_exception`` callback calls ``trainer.save_checkpoint`` (the
  usual save-on-crash callback), which used to wait in a collective the peers never join.

Each runs 2 real gloo ranks with a 60 s process-group timeout; a hang shows up as ``run_ranks``
killing the ranks, a fix as an error on every rank within seconds naming rank 1.
"""
from __future__ import annotations

import time
import warnings
from typing import Any

import pytest
import torch

from callbacks import Callback
from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import DDPStrategy, Trainer
from trainer.checkpoint_io.file_format import load_checkpoint

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(90)]

BATCHES, SHORT_AT = 8, 5  # rank 1's loader announces 8 batches and yields 5


class LyingLoader:
    """A loader whose ``len()`` says ``BATCHES`` but which, on rank ``liar``, stops after ``SHORT_AT``."""

    def __init__(self, rank: int, liar: int = 1) -> None:
        self.inner = loader(regression_data(4 * BATCHES, seed=rank), 4)
        self.stop = SHORT_AT if rank == liar else BATCHES

    def __len__(self) -> int:
        return BATCHES

    def __iter__(self):
        for i, batch in enumerate(self.inner):
            if i == self.stop:
                return
            yield batch


def _outcome(run) -> tuple[str, str, float]:
    """(error type, message, seconds until the run ended) on this rank."""
    started = time.monotonic()
    try:
        run()
    except Exception as err:  # noqa: BLE001 - the test compares what each rank saw
        return type(err).__name__, str(err), time.monotonic() - started
    return "no error", "", time.monotonic() - started


def _short_loader(rank: int, world_size: int, stage: str) -> tuple[str, str, float]:
    torch.set_num_threads(1)
    trainer = Trainer(
        max_epochs=2, accelerator="cpu", strategy=DDPStrategy(timeout=60), use_distributed_sampler=False,
        **QUIET,
    )
    run = trainer.fit if stage == "fit" else trainer.validate
    return _outcome(lambda: run(Regression(), LyingLoader(rank)))


# One launch per case: a peer learns of the failure when the failing rank's process exits
# (its gloo connections close), which it does right after the run, as a script does.
@pytest.mark.parametrize(
    "stage, where",
    [
        ("fit", f"the train dataloader ended before batch_idx {SHORT_AT} of epoch 0"),
        ("validate", f"the validation dataloader ended before batch_idx {SHORT_AT}"),
    ],
)
def test_a_loader_shorter_than_its_len_fails_every_rank_naming_rank_and_batch(stage, where):
    (kind0, text0, took), (kind1, text1, _) = run_ranks(
        _short_loader, world_size=2, args=(stage,), init_group=False, timeout=60
    )
    expected = (
        f"Rank 1: {where}: it yielded {SHORT_AT} batches, fewer batches than len() announced ({BATCHES})"
    )
    assert kind1 == "ValueError" and text1.startswith(expected), text1
    assert kind0 == "RankFailedError", (kind0, text0)
    assert text0.startswith("Rank 1 failed at epoch 0, ") and f": ValueError: {expected}" in text0, text0
    print(f"rank 0 ended {took:.1f} s after its run started")


class _Boom(Regression):
    """Rank 1 raises at step 3; with ``nan_at_step_2`` its loss at step 2 is NaN first (the loss
    check runs every 50 steps, so only the save finds it)."""

    def __init__(self, nan_at_step_2: bool = False) -> None:
        super().__init__()
        self.nan_at_step_2 = nan_at_step_2

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_rank == 1 and self.global_step == 3:
            raise RuntimeError("boom on rank 1")
        loss = super().training_step(batch, batch_idx)
        if self.nan_at_step_2 and self.global_rank == 1 and self.global_step == 2:
            return loss * float("nan")
        return loss


class SaveOnCrash(Callback):
    """The usual save-on-crash callback."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_exception(self, trainer: Trainer, module: Any, exception: BaseException) -> None:
        trainer.save_checkpoint(self.path)


def _crash_and_save(rank: int, world_size: int, path: str, nan: bool = False) -> tuple[str, str, float, int]:
    torch.set_num_threads(1)
    trainer = Trainer(
        max_epochs=3, accelerator="cpu", strategy=DDPStrategy(timeout=60), callbacks=[SaveOnCrash(path)],
        **QUIET,
    )
    kind, text, took = _outcome(lambda: trainer.fit(_Boom(nan), loader(regression_data(64), 4)))
    return kind, text, took, trainer.global_step


def _resume(rank: int, world_size: int, path: str) -> tuple[int, list[torch.Tensor], list[str]]:
    torch.set_num_threads(1)
    trainer = Trainer(max_epochs=1, accelerator="cpu", strategy=DDPStrategy(timeout=60), **QUIET)
    module = Regression()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, loader(regression_data(64), 4), ckpt_path=path)
    params = [p.detach().clone() for p in module.parameters()]
    return trainer.global_step, params, [str(w.message) for w in caught]


def test_save_checkpoint_in_on_exception_writes_rank_zeros_state_without_waiting_for_peers(tmp_path):
    path = tmp_path / "crash.ckpt"
    (kind0, text0, took, step0), (kind1, text1, _, _) = run_ranks(
        _crash_and_save, world_size=2, args=(str(path),), init_group=False, timeout=60
    )
    assert (kind1, text1) == ("RuntimeError", "boom on rank 1")
    assert kind0 == "RankFailedError", (kind0, text0)
    assert text0.startswith(
        "Rank 1 failed at epoch 0, global step 3, batch index 3: RuntimeError: boom on rank 1."
    ), text0
    print(f"rank 0 ended {took:.1f} s after its fit started")
    # Documented (docs/checkpointing.md): no collective; global rank 0 writes its own state.
    ckpt = load_checkpoint(path)
    assert ckpt["global_step"] == step0 == 3
    position = ckpt["loops"]["fit_loop"]
    assert (position["batches_done"], position["epoch_finished"]) == (3, False)
    assert ckpt["rank_states"][0] is not None and ckpt["rank_states"][1] is None
    # It resumes: the epoch's order is known for rank 0 only, so every rank restarts the epoch
    # (rank 0 resuming at batch 3 and rank 1 at batch 0 would wait in different collectives).
    (step0, params0, warned0), (step1, params1, _) = run_ranks(
        _resume, world_size=2, args=(str(path),), init_group=False, timeout=60
    )
    assert step0 == step1 == 3 + 8  # 8 batches per rank and epoch
    assert all(torch.equal(a, b) for a, b in zip(params0, params1))
    assert any("the epoch restarts from its first batch on every rank" in w for w in warned0), warned0


def test_save_checkpoint_in_on_exception_writes_nothing_after_a_non_finite_loss(tmp_path):
    """Rank 1's NaN loss at step 2 is in every rank's weights: rank 0's own losses show it, so its
    crash save refuses (without a collective) and raises the non-finite error instead."""
    path = tmp_path / "crash.ckpt"
    (kind0, text0, _, _), (kind1, text1, _, _) = run_ranks(
        _crash_and_save, world_size=2, args=(str(path), True), init_group=False, timeout=60
    )
    assert (kind1, text1) == ("RuntimeError", "boom on rank 1")
    assert kind0 == "NonFiniteLossError", (kind0, text0)
    assert "global step 3" in text0 and "No checkpoint is written after a non-finite loss" in text0, text0
    assert not path.exists()
