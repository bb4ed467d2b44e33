"""Launched by tests/strategies/test_ddp_predict.py: `trainer.predict` under several processes.

Row ``i`` of every dataset holds the number ``i`` and ``predict_step`` returns the batch's row
numbers, so the returned predictions show which rows came back, how often and in what order.
Runs the predicts named by ``--cases`` (``20``: 20 rows; ``21``: 21 rows; ``two_loaders``: loaders
of 21 and 7 rows; ``own_sampler``: 20 rows through the user's own DistributedSampler, needs a
launcher's RANK) and saves what each returned with `save_rank_result` (under ddp_spawn: the
launching process's; every case there starts new processes).

Options: ``--devices N``, ``--strategy NAME`` (Trainer arguments; default: adopt the launcher).
"""
from __future__ import annotations

import argparse
import os
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from tests.helpers.distributed import save_rank_result
from tests.helpers.models import QUIET
from trainer import Trainer, TrainModule


class RowNumbers(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(1, 1)  # DDP needs a parameter

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        (x,) = batch
        return x[:, 0].long()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def rows(n: int, batch_size: int) -> DataLoader:
    return DataLoader(TensorDataset(torch.arange(n, dtype=torch.float32).unsqueeze(1)), batch_size=batch_size)


def own_sampler(n: int, batch_size: int) -> DataLoader:
    """Sharded by the user (a launcher's RANK/WORLD_SIZE), so the Trainer leaves it as is."""
    data = rows(n, batch_size).dataset
    sampler = DistributedSampler(data, int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"]), shuffle=False)
    return DataLoader(data, batch_size=batch_size, sampler=sampler)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", default="auto")
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--cases", default="20,21,two_loaders")
    args = parser.parse_args()
    devices = args.devices if args.devices == "auto" else int(args.devices)
    trainer = Trainer(accelerator="cpu", devices=devices, strategy=args.strategy, **QUIET)
    model = RowNumbers()
    loaders = {
        "20": lambda: rows(20, 4),
        "21": lambda: rows(21, 4),
        "two_loaders": lambda: [rows(21, 4), rows(7, 2)],
        "own_sampler": lambda: own_sampler(20, 4),
    }
    results = {case: trainer.predict(model, loaders[case]()) for case in args.cases.split(",")}
    save_rank_result({"world_size": trainer.world_size, **results}, rank=trainer.global_rank)


if __name__ == "__main__":
    main()
