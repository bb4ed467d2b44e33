"""Launched by tests/project/test_as_lightning_processes.py under ``python -m trainer.as_lightning``: a
Lightning script, written as Lightning's docs write them, that starts more processes; each process
notes which framework its ``lightning.pytorch.Trainer`` is, and the Trainer that ran there.

``MODE`` (the first argument): ``ddp`` / ``ddp_spawn`` (``devices=2`` with that strategy; ``torchrun``
when launched by torchrun), ``spawn`` / ``forkserver`` (a ``multiprocessing`` child of that start
method), ``loader`` (a DataLoader with one worker of the ``spawn`` context), ``ddp_then_alone`` (``ddp`` on 2
ranks, then in each rank a ``Trainer(devices=1)`` that predicts alone, as libraries' ``predict`` does: each
rank writes ``alone-<pid>.txt``, that Trainer's world size, rank and number of predictions),
``ddp_shuffled`` (``ddp`` on 2 ranks over a shuffled loader: each rank writes ``params-<pid>.txt``). Every process writes
``<where>-<pid>.txt`` into ``$LOCKSTEP_TEST_OUT``: the module of ``lightning.pytorch.Trainer`` there,
and for a rank the module of the Trainer that fitted.
"""
import multiprocessing
import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset

import lightning.pytorch as pl

OUT = os.environ["LOCKSTEP_TEST_OUT"]


def note(where: str, ran: str = "") -> None:
    seen = sys.modules["lightning.pytorch"].Trainer.__module__
    with open(os.path.join(OUT, f"{where}-{os.getpid()}.txt"), "w") as f:
        f.write(f"{seen} {ran}".strip())


class Data(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, index):
        note("loader")
        return torch.full((4,), float(index)), torch.ones(1)


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def on_fit_start(self):
        note(f"rank{self.global_rank}", type(self.trainer).__module__)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def predict_step(self, batch, batch_idx):
        return self.net(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def child():
    note("child")


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode in ("spawn", "forkserver"):
        process = multiprocessing.get_context(mode).Process(target=child)
        process.start()
        process.join()
        sys.exit(process.exitcode)
    workers = {"num_workers": 1, "multiprocessing_context": "spawn"} if mode == "loader" else {}
    strategy = "ddp" if mode in ("ddp_then_alone", "ddp_shuffled") else mode
    two = {"devices": 2, "strategy": strategy} if strategy in ("ddp", "ddp_spawn") else {"devices": 1}
    quiet = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}
    trainer = pl.Trainer(accelerator="cpu", max_steps=2, **quiet, **two)
    torch.manual_seed(0)
    model = M()
    shuffled = {"batch_size": 2, "shuffle": True} if mode == "ddp_shuffled" else {"batch_size": 4}
    trainer.fit(model, DataLoader(Data(), **shuffled, **workers))
    if mode == "ddp_shuffled":
        values = torch.cat([p.detach().flatten() for p in model.parameters()])
        with open(os.path.join(OUT, f"params-{os.getpid()}.txt"), "w") as f:
            f.write(f"rank={trainer.global_rank} " + ",".join(f"{v:.6f}" for v in values.tolist()))
    if mode == "ddp_then_alone":
        alone = pl.Trainer(accelerator="cpu", devices=1, **quiet)
        predicted = alone.predict(model, DataLoader(Data(), batch_size=4))
        with open(os.path.join(OUT, f"alone-{os.getpid()}.txt"), "w") as f:
            f.write(f"world={alone.world_size} rank={alone.global_rank} predicted={sum(len(p) for p in predicted)}")
