"""Train a small CNN with BatchNorm on scikit-learn's bundled 8x8 digits (no download).

    python examples/digits.py                         # one process
    python examples/digits.py --devices 2             # two processes, DDP (the Trainer launches them)
    torchrun --nproc_per_node 2 examples/digits.py    # the same, launched by torchrun

TensorBoard logs go to <root>/logs/version_N: `tensorboard --logdir <root>/logs`.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import Trainer, TrainModule, seed_everything


def digits_datasets(seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    """80/20 split of the 1,797 digits images, scaled to [0, 1], as (N, 1, 8, 8) tensors."""
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    x = torch.tensor(images, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    y = torch.tensor(labels, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(x))
    train, val = order[:cut], order[cut:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[val], y[val])


class DigitsCNN(TrainModule):
    """Two conv blocks with BatchNorm and a small classifier head."""

    def __init__(self, lr: float = 3e-3, weight_decay: float = 1e-4, optimizer: str = "adamw") -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(32 * 4 * 4, 64), nn.ReLU(),
            nn.Linear(64, 10),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self) -> Any:
        name = self.hparams["optimizer"]
        lr, wd = self.hparams["lr"], self.hparams["weight_decay"]
        if name == "adamw":
            return torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=wd)
        from trainer import optim

        optimizers = {"lars": optim.LARS, "lamb": optim.LAMB, "novograd": optim.NovoGrad}
        return optimizers[name](self.parameters(), lr=lr, weight_decay=wd)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default="auto", help="processes on this machine (default: auto)")
    parser.add_argument("--accumulate", type=int, default=1, help="accumulate_grad_batches (A)")
    parser.add_argument("--max-epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32, help="micro batch per process (b)")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--optimizer", default="adamw", choices=["adamw", "lars", "lamb", "novograd"])
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--sync-batchnorm", action="store_true")
    parser.add_argument("--root", default="digits_run", help="default_root_dir (logs, checkpoints)")
    parser.add_argument("--result-json", default=None, help="write the final metrics here (rank 0)")
    args = parser.parse_args(argv)

    seed_everything(0)
    train, val = digits_datasets()
    devices = args.devices if args.devices == "auto" else int(args.devices)
    trainer = Trainer(
        max_epochs=args.max_epochs,
        devices=devices,
        strategy=args.strategy,
        accumulate_grad_batches=args.accumulate,
        sync_batchnorm=args.sync_batchnorm,
        default_root_dir=args.root,
        log_every_n_steps=10,
        num_sanity_val_steps=0,
    )
    model = DigitsCNN(lr=args.lr, optimizer=args.optimizer)
    trainer.fit(
        model,
        DataLoader(train, batch_size=args.batch_size, shuffle=True),
        DataLoader(val, batch_size=256),
    )
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if trainer.is_global_zero:
        print(f"val_acc={metrics['val_acc']:.4f} val_loss={metrics['val_loss']:.4f} "
              f"world_size={trainer.world_size} global_batch={trainer.global_batch_size} log_dir={trainer.log_dir}")
        if args.result_json:
            with open(args.result_json, "w") as f:
                json.dump({**metrics, "world_size": trainer.world_size, "global_step": trainer.global_step}, f)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
