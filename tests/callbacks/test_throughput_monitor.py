"""ThroughputMonitor: the numbers are there, positive and consistent; data waits are measured."""

from __future__ import annotations

import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from callbacks import Logger, ThroughputMonitor
from tests.helpers.callbacks import Scripted
from trainer import Trainer

KEYS = (
    "throughput/samples_per_sec",
    "throughput/steps_per_sec",
    "throughput/data_wait_ms",
    "throughput/data_wait_fraction",
)


class _MemoryLogger(Logger):
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics, step):
        if KEYS[0] in metrics:
            self.rows.append((step, dict(metrics)))


class _SlowData(Dataset):
    def __init__(self, n: int, delay_s: float) -> None:
        self.n, self.delay_s = n, delay_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.delay_s)
        x = torch.full((3,), float(i))
        return x, x.sum(dim=0, keepdim=True)


def _fit(monitor, dataset, batch_size, epochs=1, accumulate=1, log_every_n_steps=2):
    logger = _MemoryLogger()
    trainer = Trainer(accelerator="cpu",
        max_epochs=epochs,
        callbacks=[monitor],
        logger=logger,
        log_every_n_steps=log_every_n_steps,
        accumulate_grad_batches=accumulate,
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    trainer.fit(Scripted(), DataLoader(dataset, batch_size=batch_size))
    return logger.rows


def test_numbers_present_positive_and_consistent():
    rows = _fit(ThroughputMonitor(), _SlowData(32, 0.0), batch_size=4, epochs=2, accumulate=2)
    assert [step for step, _ in rows] == [2, 4, 6, 8]  # 4 optimizer steps per epoch
    for _, m in rows:
        assert m[KEYS[0]] > 0 and m[KEYS[1]] > 0 and m[KEYS[2]] >= 0 and 0 <= m[KEYS[3]] <= 1
        # same interval: samples / steps = the global batch (4 samples x 2 micro batches)
        assert m[KEYS[0]] / m[KEYS[1]] == pytest.approx(8.0)


def test_data_wait_is_measured():
    # each batch of 2 samples takes >= 20 ms to load, far more than the tiny model's step
    rows = _fit(ThroughputMonitor(log_every_n_steps=4), _SlowData(16, 0.01), batch_size=2)
    assert [step for step, _ in rows] == [4, 8]
    for _, m in rows:
        assert m["throughput/data_wait_ms"] >= 15.0
        assert m["throughput/data_wait_fraction"] > 0.5


def test_bad_argument():
    with pytest.raises(
        ValueError, match=r"ThroughputMonitor\(log_every_n_steps\) must be None or an int >= 1, got 0"
    ):
        ThroughputMonitor(log_every_n_steps=0)
