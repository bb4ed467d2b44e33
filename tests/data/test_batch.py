"""The one batch walk (`trainer.data.batch`): every reader of a batch agrees on what it holds.

`self.log` epoch means are weighted by the batch size and ThroughputMonitor counts samples by it:
both must read the same size from the same batch, whatever container it comes in, and moving a
batch must give back the same container types.
"""
from __future__ import annotations

import dataclasses
from collections import namedtuple
from typing import Any

import pytest
import torch
from torch import nn

from callbacks import ThroughputMonitor
from tests.helpers.models import QUIET
from trainer import Trainer, TrainModule
from trainer.accelerators.accelerator import move_to_device
from trainer.data.batch import apply_to_tensors, batch_size

pytestmark = pytest.mark.timeout(60)

Pair = namedtuple("Pair", ["x", "flag"])
SIZES = [3, 5, 2, 4]


@dataclasses.dataclass
class Sample:
    x: torch.Tensor
    flag: torch.Tensor
    name: str = "sample"


# Each batch holds its rows `x` (first in container order) and a one-element `flag` that a
# breadth-first walk of the nested list would meet first: only "the first tensor in order" counts
# `len(x)` rows in every container.
WRAP = {
    "dataclass": lambda x, flag: Sample(x, flag),
    "namedtuple": lambda x, flag: Pair(x, flag),
    "dict": lambda x, flag: {"x": x, "flag": flag},
    "nested_list": lambda x, flag: [[x], flag],
}


def _rows(batch: Any) -> torch.Tensor:
    if isinstance(batch, list):
        return batch[0][0]
    return batch["x"] if isinstance(batch, dict) else batch.x


class _Batches:
    """An iterable of ready-made batches (not a DataLoader: no batch size to fall back on)."""

    def __init__(self, batches: list[Any]) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Any:
        return iter(self.batches)


class _CountsRows(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x = _rows(batch)
        self.log("rows", float(x.shape[0]), on_step=False, on_epoch=True)  # weighted by the batch size
        return self.net(x).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


@pytest.mark.parametrize("kind", sorted(WRAP))
def test_log_epoch_means_and_throughput_monitor_read_the_same_batch_size(kind):
    batches = [WRAP[kind](torch.randn(n, 4), torch.zeros(1)) for n in SIZES]
    monitor = ThroughputMonitor(log_every_n_steps=1000)  # no interval ends: the fit's samples
    trainer = Trainer(accelerator="cpu", max_epochs=1, callbacks=[monitor], **QUIET)
    trainer.fit(_CountsRows(), _Batches(batches))
    # mean of n weighted by n: sum(n^2) / sum(n)
    expected = sum(n * n for n in SIZES) / sum(SIZES)
    assert float(trainer.callback_metrics["rows"]) == pytest.approx(expected)
    assert monitor._samples == sum(SIZES)
    assert [batch_size(b) for b in batches] == SIZES


def test_batch_size_is_the_first_tensor_in_container_order():
    assert batch_size([[torch.zeros(3, 2)], torch.zeros(1)]) == 3
    assert batch_size({"meta": "text", "x": torch.zeros(6)}) == 6
    assert batch_size(Sample(torch.zeros(2, 5), torch.zeros(9))) == 2
    assert batch_size(torch.tensor(1.0)) == 1  # a 0-d tensor is one sample
    assert batch_size(["no", ("tensors", 1)]) is None


class _Row(list):
    """A list subclass: moved batches give back plain lists, as before."""


@pytest.mark.parametrize("kind", sorted(WRAP))
def test_moves_keep_the_container_types(kind):
    batch = WRAP[kind](torch.randn(2, 3, 4, 5), torch.ones(1))
    moved = move_to_device(batch, torch.device("cpu"), channels_last=True)
    assert type(moved) is type(batch)
    rows = _rows(moved)
    assert rows.is_contiguous(memory_format=torch.channels_last) and torch.equal(rows, _rows(batch))
    doubled = apply_to_tensors(batch, lambda t: t * 2)
    assert type(doubled) is type(batch) and torch.equal(_rows(doubled), 2 * _rows(batch))
    if kind == "dataclass":
        assert doubled.name == "sample" and torch.equal(doubled.flag, 2 * torch.ones(1))
    if kind == "nested_list":
        assert type(doubled[0]) is list


def test_other_leaves_are_kept_or_mapped():
    batch = (torch.ones(2), "label", None, _Row([torch.zeros(1)]))
    kept = apply_to_tensors(batch, lambda t: t + 1)
    assert type(kept) is tuple and kept[1:3] == ("label", None) and type(kept[3]) is list
    assert torch.equal(kept[0], torch.full((2,), 2.0))
    tagged = apply_to_tensors(batch, lambda t: t, other=lambda leaf: ("seen", leaf))
    assert tagged[1] == ("seen", "label") and tagged[2] == ("seen", None)
