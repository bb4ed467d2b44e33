"""The one training script of the fault matrix: ``fault_script.py CASE LAUNCHER ROOT``.

Two ranks on CPU (gloo) train a tiny regressor: 64 samples, micro batch 4, so 8 batches per rank
and epoch, one optimizer step per batch, a step checkpoint every 2 steps (``ROOT/ckpts``, with
``last.ckpt``). Rank 1 injects the fault ``CASE`` at global step 11 (epoch 1, batch index 3),
after the good checkpoint of step 10, unless the case says otherwise (see ``CASES`` in
test_fault_matrix.py). ``LAUNCHER`` picks how the Trainer is built: ``python``
(``Trainer(devices=2)``, which re-launches the script under torch's elastic agent), ``torchrun``
(adopt the launcher's ranks) or ``spawn`` (``strategy="ddp_spawn"``).

Just before a rank injects the fault it appends ``<time.time()>`` to ``ROOT/fault_at``, so the
test measures how long the run takes to end *after* the fault. For ``sigkill_launcher`` and
``sigterm_launcher`` rank 0 writes it at the same point and then slows down (so workers that
outlive their launcher are still there to be found), and the test signals the launcher.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from callbacks import Callback, ModelCheckpoint
from trainer import Trainer, TrainModule

FAULT_STEP = 11  # epoch 1, batch index 3: the step checkpoint of step 10 is the last good one
BATCHES_PER_EPOCH = 8


def _mark_fault(root: str) -> None:
    with open(os.path.join(root, "fault_at"), "a") as f:
        f.write(f"{time.time()}\n")


def _rank() -> int:
    # Read at run time, not at import: under ddp_spawn the objects are built in the launching
    # process and only used in the workers (DataLoader workers inherit it too).
    return int(os.environ.get("RANK", "0"))


def _data(n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


class Model(TrainModule):
    def __init__(self, case: str, root: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(4, 1)
        self.case, self.root = case, root

    def setup(self, stage: str) -> None:
        if self.case == "raise_setup" and self.global_rank == 1:
            _mark_fault(self.root)
            raise RuntimeError("fault injected in setup")

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        if self.global_rank == 1 and self.global_step == FAULT_STEP:
            if self.case in ("raise_train", "on_exception_save"):
                _mark_fault(self.root)
                raise RuntimeError("fault injected in training_step")
            if self.case == "sigkill_worker":
                _mark_fault(self.root)
                os.kill(os.getpid(), signal.SIGKILL)
            if self.case == "nan_loss":
                _mark_fault(self.root)
                loss = loss * float("nan")
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if (
            self.case == "raise_val"
            and self.global_rank == 1
            and not self.trainer.sanity_checking
            and self.global_step > FAULT_STEP
            and batch_idx == 1
        ):
            _mark_fault(self.root)
            raise RuntimeError("fault injected in validation_step")
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Fault(Callback):
    """The faults injected from callback hooks."""

    def __init__(self, case: str, root: str) -> None:
        self.case, self.root = case, root

    def on_train_batch_start(self, trainer: Trainer, module: TrainModule, batch: Any, batch_idx: int) -> None:
        if trainer.global_step != FAULT_STEP:
            if self.case.endswith("_launcher") and trainer.global_step > FAULT_STEP:
                time.sleep(1.0)  # keep orphaned workers alive long enough to be seen
            return
        if self.case == "raise_callback" and trainer.global_rank == 1:
            _mark_fault(self.root)
            raise RuntimeError("fault injected in on_train_batch_start")
        if self.case == "sigterm" and trainer.global_rank == 1:
            _mark_fault(self.root)
            os.kill(os.getpid(), signal.SIGTERM)
        if self.case.endswith("_launcher") and trainer.global_rank == 0:
            _mark_fault(self.root)

    def on_exception(self, trainer: Trainer, module: TrainModule, exception: BaseException) -> None:
        if self.case == "on_exception_save":
            # The usual save-on-crash callback: every rank calls it, as save_checkpoint asks.
            trainer.save_checkpoint(os.path.join(self.root, "ckpts", "on_exception.ckpt"))


class LyingBatchSampler:
    """Claims 8 batches per epoch, but on rank 1 yields only 3 in epoch 1 (shards by itself)."""

    def __init__(self, root: str) -> None:
        self.root, self.epoch = root, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return BATCHES_PER_EPOCH

    def __iter__(self) -> Iterator[list[int]]:
        indices = list(range(_rank(), 2 * 4 * BATCHES_PER_EPOCH, 2))
        short = _rank() == 1 and self.epoch == 1
        for b in range(BATCHES_PER_EPOCH):
            if short and b == FAULT_STEP - BATCHES_PER_EPOCH:
                _mark_fault(self.root)
                return
            yield indices[4 * b: 4 * b + 4]


class RaisingDataset(Dataset):
    """Raises in the DataLoader worker on rank 1 when asked for batch index 3 of epoch 0.

    The worker process fetches one sample after another and is restarted each epoch, so the
    13th sample it is asked for in its life is the first of batch 3 of the first epoch.
    """

    def __init__(self, root: str) -> None:
        self.data, self.root, self.fetched = _data(64), root, 0

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> Any:
        self.fetched += 1
        if _rank() == 1 and self.fetched == 3 * 4 + 1:
            _mark_fault(self.root)
            raise RuntimeError("fault injected in a DataLoader worker")
        return self.data[i]


def main(argv: list[str] | None = None) -> None:
    case, launcher, root = (sys.argv[1:] if argv is None else argv)[:3]
    torch.set_num_threads(1)
    kwargs: dict[str, Any] = {}
    if launcher == "python":
        kwargs.update(devices=2, strategy="ddp")
    elif launcher == "spawn":
        kwargs.update(devices=2, strategy="ddp_spawn")
    elif launcher not in ("torchrun", "forked"):  # forked: adopt the ranks' variables, as under torchrun
        raise SystemExit(f"unknown launcher {launcher!r}")
    if case == "lying_len":
        train = DataLoader(_data(64), batch_sampler=LyingBatchSampler(root))
        kwargs["use_distributed_sampler"] = False
    elif case == "loader_worker_raises":
        train = DataLoader(RaisingDataset(root), batch_size=4, num_workers=1)
    else:
        train = DataLoader(_data(64), batch_size=4)
    trainer = Trainer(
        max_epochs=30 if case.endswith("_launcher") else 3,
        val_check_interval=4,
        callbacks=[
            ModelCheckpoint(dirpath=os.path.join(root, "ckpts"), every_n_train_steps=2, save_last=True),
            Fault(case, root),
        ],
        default_root_dir=root,
        logger=False,
        enable_progress_bar=False,
        accelerator="cpu",
        **kwargs,
    )
    trainer.fit(Model(case, root), train, DataLoader(_data(16), batch_size=4))
    Path(root, f"finished.rank{trainer.global_rank}").touch()


if __name__ == "__main__":
    main()
