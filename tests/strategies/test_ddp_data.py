"""What DDP does to data, metrics and learning rates, with 2 real gloo ranks.

One launch (`_data_checks`) runs several small Trainer jobs per rank; the tests below compare its
numbers with one process: shuffled shards per epoch, exact evaluation over an odd-sized dataset,
`sync_dist` logging, uneven validation shards from a user's sampler, and LR scaling. Uneven
*training* batch counts get their own launch: a regression there hangs or aborts the ranks.
"""
from __future__ import annotations

import contextlib
import io
import math
import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import ConcatDataset, DataLoader, Dataset, Sampler, Subset

from callbacks import Logger
from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET, Regression, loader, params_of, regression_data
from trainer import DDPStrategy, Trainer, TrainModule, seed_everything

pytestmark = pytest.mark.distributed

SEED = 7
INDEX_SAMPLES, INDEX_BATCH, INDEX_EPOCHS = 16, 4, 3
VAL_SAMPLES, VAL_BATCH = 37, 5  # 19 + 18 samples: not divisible by W=2
UNEVEN_VAL = {0: 25, 1: 15}  # samples a user's sampler gives each rank: 5 and 3 batches of 5
LR, LR_STEPS = 0.1, 5


class IndexData(Dataset):
    """Sample i is the number i."""

    def __len__(self) -> int:
        return INDEX_SAMPLES

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(i)


class Recorder(TrainModule):
    """Records the sample indices of every batch; logs a rank-dependent value."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.seen: dict[int, list[int]] = {}

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.seen.setdefault(self.current_epoch, []).extend(batch.tolist())
        value = float(10 * self.global_rank + batch_idx)
        self.log("synced", value, on_step=False, on_epoch=True, sync_dist=True)
        self.log("local", value, on_step=False, on_epoch=True)
        self.log("step_synced", value, on_step=True, on_epoch=False, sync_dist=True)
        self.log("step_max", value, on_step=True, on_epoch=False, sync_dist=True, reduce_fx="max")
        self.log("step_local", value, on_step=True, on_epoch=False)
        return (self.w * batch.float()).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class StepValues(Logger):
    """Keeps every record the Trainer sends (global rank 0 only)."""

    def __init__(self) -> None:
        self.records: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.records.append((step, dict(metrics)))


class FirstN(Sampler):
    """A user's own, non-distributed sampler: indices ``start .. start + n - 1``."""

    def __init__(self, n: int, start: int = 0) -> None:
        self.n, self.start = n, start

    def __iter__(self):
        return iter(range(self.start, self.start + self.n))

    def __len__(self) -> int:
        return self.n


class LRRecorder(Regression):
    """SGD(lr=0.1) with a per-step scheduler; records the LR after every optimizer step."""

    def __init__(self, schedule: str) -> None:
        super().__init__("sgd", lr=LR)
        self.schedule = schedule
        self.lrs: list[float] = []

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=LR)
        if self.schedule == "linear":
            sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.5, total_iters=4)
        else:
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])


def _lr_run(scale_lr: Any, schedule: str, batch_size: int) -> dict[str, Any]:
    module = LRRecorder(schedule)
    out = io.StringIO()
    trainer = Trainer(accelerator="cpu", max_steps=LR_STEPS, scale_lr=scale_lr, **QUIET)
    with contextlib.redirect_stdout(out):
        trainer.fit(module, loader(regression_data(2 * LR_STEPS * 4), batch_size))
    group = trainer.optimizers[0].param_groups[0]
    return {
        "lrs": module.lrs,
        "initial_lr": group["initial_lr"],
        "base_lrs": list(trainer.lr_scheduler_configs[0].scheduler.base_lrs),
        "stdout": out.getvalue(),
    }


def _data_checks(rank: int, world_size: int) -> dict[str, Any]:
    seed_everything(SEED)
    out: dict[str, Any] = {}

    # 1. shuffled training shards, and sync_dist logging
    module, step_values = Recorder(), StepValues()
    quiet = {**QUIET, "logger": step_values}
    trainer = Trainer(accelerator="cpu", max_epochs=INDEX_EPOCHS, log_every_n_steps=1, **quiet)
    torch.manual_seed(SEED + rank)  # the ranks' generators differ: rank 0's draws the order
    trainer.fit(module, DataLoader(IndexData(), batch_size=INDEX_BATCH, shuffle=True))
    out["seen"] = module.seen
    out["step_records"] = [(step, {k: v for k, v in m.items() if k.startswith("step_")}) for step, m in step_values.records]
    out["synced"] = float(trainer.callback_metrics["synced"])
    out["local"] = float(trainer.callback_metrics["local"])

    # 2. exact evaluation: 37 samples over 2 ranks, no padded duplicates counted
    [metrics] = Trainer(accelerator="cpu", **QUIET).validate(Regression(), loader(regression_data(VAL_SAMPLES), VAL_BATCH))
    out["val_loss"] = metrics["val_loss"]

    # 3. a user's sampler gives the ranks 5 and 3 validation batches: no per-batch collective
    uneven = DataLoader(regression_data(40), batch_size=VAL_BATCH, sampler=FirstN(UNEVEN_VAL[rank]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = Trainer(accelerator="cpu", **QUIET)
        [metrics] = trainer.validate(Regression(), uneven)
    out["uneven_val_loss"] = metrics["val_loss"]
    out["warnings"] = [str(w.message) for w in caught]

    # 4. LR scaling
    out["lr_linear"] = _lr_run(True, "linear", 4)
    out["lr_sqrt"] = _lr_run("sqrt", "step", 4)
    return out


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(_data_checks, init_group=False, timeout=150)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_shuffled_shards_are_disjoint_cover_the_data_and_change_every_epoch(ranks):
    r0, r1 = ranks[0]["seen"], ranks[1]["seen"]
    assert sorted(r0) == sorted(r1) == list(range(INDEX_EPOCHS))
    for epoch in range(INDEX_EPOCHS):
        assert len(r0[epoch]) == len(r1[epoch]) == INDEX_SAMPLES // 2
        assert not set(r0[epoch]) & set(r1[epoch])
        assert sorted(r0[epoch] + r1[epoch]) == list(range(INDEX_SAMPLES))
        # disjoint and covering although each rank's own generator would draw another order:
        # both cut rank 0's permutation
    assert r0[0] != r0[1] != r0[2] and r0[0] != r0[2]


@pytest.mark.timeout(180)
def test_sync_dist_reduces_training_logs_across_ranks(ranks):
    # rank r logs 10 r + batch_idx for batches 0, 1 of the last epoch
    assert [r["local"] for r in ranks] == [0.5, 10.5]
    assert [r["synced"] for r in ranks] == [5.5, 5.5]


@pytest.mark.timeout(180)
def test_sync_dist_on_step_values_are_the_mean_across_ranks(ranks):
    # Every step, rank r logs 10 r + batch_idx; only rank 0's loggers receive records.
    records = [(step, m) for step, m in ranks[0]["step_records"] if m]
    steps_per_epoch = INDEX_SAMPLES // 2 // INDEX_BATCH
    # at the steps before each step (Lightning's, docs/logging.md)
    assert [step for step, _ in records] == list(range(INDEX_EPOCHS * steps_per_epoch))
    for step, m in records:
        batch_idx = step % steps_per_epoch
        assert m == {"step_synced": 5.0 + batch_idx, "step_max": 10.0 + batch_idx, "step_local": float(batch_idx)}
    assert ranks[1]["step_records"] == []


def _single_validate(dataset) -> float:
    [metrics] = Trainer(accelerator="cpu", **QUIET).validate(Regression(), loader(dataset, VAL_BATCH))
    return metrics["val_loss"]


@pytest.mark.timeout(180)
def test_validation_over_an_odd_dataset_equals_one_process(ranks):
    reference = _single_validate(regression_data(VAL_SAMPLES))
    for r in ranks:
        assert abs(r["val_loss"] - reference) <= 1e-6
    # Not vacuous: counting the padded duplicate (sample 0 again) would change the mean.
    data = regression_data(VAL_SAMPLES)
    padded = _single_validate(ConcatDataset([data, Subset(data, [0])]))
    assert abs(padded - reference) > 1e-4


@pytest.mark.timeout(180)
def test_uneven_validation_shards_from_a_custom_sampler_do_not_hang(ranks):
    # Each rank validated its own samples (5 and 3 batches); the mean covers both ranks' samples.
    both = ConcatDataset([Subset(regression_data(40), range(n)) for n in UNEVEN_VAL.values()])
    reference = _single_validate(both)
    for r in ranks:
        assert abs(r["uneven_val_loss"] - reference) <= 1e-6
        assert any("EACH OF THE 2 RANKS WILL SEE THE FULL DATA" in w for w in r["warnings"])


@pytest.mark.timeout(180)
@pytest.mark.parametrize("key, factor", [("lr_linear", 2.0), ("lr_sqrt", math.sqrt(2.0))])
def test_scale_lr_multiplies_lr_initial_lr_and_the_schedule(ranks, key, factor):
    scale_lr, schedule = (True, "linear") if key == "lr_linear" else ("sqrt", "step")
    single = _lr_run(scale_lr, schedule, 8)  # W=1: the factor is 1
    assert len(single["lrs"]) == LR_STEPS and single["initial_lr"] == LR and single["stdout"] == ""
    for r in ranks:
        scaled = r[key]
        assert scaled["lrs"] == pytest.approx([factor * lr for lr in single["lrs"]], rel=1e-12)
        assert scaled["initial_lr"] == pytest.approx(factor * LR, rel=1e-12)
        assert scaled["base_lrs"] == pytest.approx([factor * LR], rel=1e-12)
    # printed once, by rank 0
    assert ranks[0][key]["stdout"].count("[lockstep] scale_lr=") == 1
    assert f"learning rate x{factor:g} for W=2" in ranks[0][key]["stdout"]
    assert ranks[1][key]["stdout"] == ""


# ----------------------------------------------------------------------------------------------
# Uneven training batch counts
# ----------------------------------------------------------------------------------------------
UNEVEN_TRAIN = {0: (0, 20), 1: (20, 12)}  # (first index, samples): 5 and 3 batches of 4


def _uneven_training(rank: int, world_size: int) -> dict[str, Any]:
    start, n = UNEVEN_TRAIN[rank]
    data = DataLoader(regression_data(32), batch_size=4, sampler=FirstN(n, start))
    # A short process-group timeout: if ranks disagree on the batch count, the run fails in 20 s
    # (a collective waiting for a peer that never comes) instead of hanging for 30 minutes.
    trainer = Trainer(accelerator="cpu", max_epochs=2, use_distributed_sampler=False, strategy=DDPStrategy(timeout=20), **QUIET)
    module = Regression("sgd")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, data)
    messages = [str(w.message) for w in caught if "different numbers of training batches" in str(w.message)]
    return {"global_step": trainer.global_step, "params": params_of(module), "warnings": messages}


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_uneven_training_batches_from_a_custom_sampler_do_not_hang():
    """Rank 0's sampler gives 5 batches, rank 1's 3: every rank must train the smallest count
    (3 per epoch), since a rank that goes on waits in an all-reduce the other never joins (with
    gloo the mismatched collectives even abort the process)."""
    r0, r1 = run_ranks(_uneven_training, init_group=False, timeout=60)
    assert r0["global_step"] == r1["global_step"] == 6
    assert len(r0["warnings"]) == 1 and "[5, 3]" in r0["warnings"][0] and r1["warnings"] == []
    # Step k averages rank 0's batch k and rank 1's batch k: one process with those 8 samples.
    batches = [list(range(4 * k, 4 * k + 4)) + list(range(20 + 4 * k, 24 + 4 * k)) for k in range(3)]
    reference = Regression("sgd")
    Trainer(accelerator="cpu", max_epochs=2, **QUIET).fit(reference, DataLoader(regression_data(32), batch_sampler=batches))
    for r in (r0, r1):
        for a, b in zip(r["params"], params_of(reference)):
            assert (a - b).abs().max().item() <= 1e-5
