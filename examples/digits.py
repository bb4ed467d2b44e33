"""Train a small CNN with BatchNorm on scikit-learn's bundled 8x8 digits (no download).

    python examples/digits.py                         # one process
    python examples/digits.py --devices 2             # two processes, DDP (the Trainer launches them)
    torchrun --nproc_per_node 2 examples/digits.py    # the same, launched by torchrun
    python examples/digits.py --optimizer lamb        # lars | larc | lamb | novograd: warmup + cosine
    python -m trainer fit --config examples/digits.yaml   # the same model and data from a config

TensorBoard logs go to <root>/logs/version_N: `tensorboard --logdir <root>/logs`.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import DataModule, Trainer, TrainModule, seed_everything


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


class DigitsData(DataModule):
    """The digits split of `digits_datasets` as loaders (``--data`` of ``python -m trainer``).

    Args:
        batch_size: Micro batch per process.
        seed: Seed of the train/validation split.
    """

    def __init__(self, batch_size: int = 32, seed: int = 0) -> None:
        self.batch_size = batch_size
        self.train, self.val = digits_datasets(seed)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=256)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=256)


class DigitsCNN(TrainModule):
    """Two conv blocks with BatchNorm and a small classifier head."""

    def __init__(self, lr: float | None = None, weight_decay: float = 1e-4, optimizer: str = "adamw") -> None:
        super().__init__()
        if optimizer not in OPTIMIZER_DEFAULTS:
            raise ValueError(f"optimizer must be one of {sorted(OPTIMIZER_DEFAULTS)}, got {optimizer!r}")
        if lr is None:
            lr = OPTIMIZER_DEFAULTS[optimizer][0]
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

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("test_loss", nn.functional.cross_entropy(logits, y))
        self.log("test_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self) -> Any:
        name = self.hparams["optimizer"]
        lr, wd = self.hparams["lr"], self.hparams["weight_decay"]
        if name == "adamw":
            return torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=wd)
        # The layer-wise optimizers: 10% linear warmup from lr/10, then cosine decay to 0, stepped
        # once per optimizer step (docs/large-batch.md).
        from trainer import optim

        options = OPTIMIZER_DEFAULTS[name][1]
        cls = {"lars": optim.LARS, "larc": optim.LARS, "lamb": optim.LAMB, "novograd": optim.NovoGrad}[name]
        opt = cls(self.named_parameters(), lr=lr, weight_decay=wd, **options)
        total = total_steps(self.trainer)
        warmup_steps = max(1, total // 10)
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, total - warmup_steps))
        sched = optim.warmup(cosine, warmup_steps=warmup_steps, start_factor=0.1)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


# Per optimizer: default learning rate and options (checked on this data set, docs/large-batch.md).
OPTIMIZER_DEFAULTS: dict[str, tuple[float, dict[str, Any]]] = {
    "adamw": (3e-3, {}),
    "lars": (1.0, {}),  # LARS: lr scales the trust ratio (trust_coefficient=0.001)
    "larc": (0.1, {"trust_coefficient": 0.02, "clip": True}),  # LARC: lr caps every layer's rate
    "lamb": (1e-2, {}),
    "novograd": (1e-2, {}),
}


def total_steps(trainer: Trainer) -> int:
    """Optimizer steps this fit will take (for a schedule's length), from max_steps or the epochs."""
    per_epoch = math.ceil(trainer.num_training_batches / trainer.accumulate_grad_batches)
    by_epochs = per_epoch * trainer.max_epochs if trainer.max_epochs not in (None, -1) else None
    if trainer.max_steps != -1:
        return trainer.max_steps if by_epochs is None else min(trainer.max_steps, by_epochs)
    if by_epochs is None:
        raise ValueError("set max_epochs or max_steps: the learning-rate schedule needs a length")
    return by_epochs


def _devices(args: argparse.Namespace) -> int | str:
    """``--devices``; without it, a resume runs on the world size its checkpoint was written on (its
    global batch, and so the run, stays the same), and a fresh run on "auto"."""
    if args.devices is not None:
        return args.devices if args.devices == "auto" else int(args.devices)
    if args.resume is None:
        return "auto"
    from trainer.checkpointing.checkpoint_paths import CheckpointPathError, resolve_checkpoint_path

    # "auto": in the processes the Trainer launches, it adopts their world as the fit's Trainer does
    probe = Trainer(accelerator="cpu", devices="auto", default_root_dir=args.root, logger=False,
                    enable_progress_bar=False)
    try:
        path = resolve_checkpoint_path(probe, args.resume)
    except CheckpointPathError:
        return "auto"  # fit(ckpt_path=...) then says what is missing
    return int(torch.load(path, map_location="cpu", weights_only=False).get("world_size", 1))


def _with_max_epochs(argv: list[str], epochs: int) -> list[str]:
    """``argv`` with ``--max-epochs epochs`` instead of its own: the command to paste to train on."""
    kept, skip_value = [], False
    for arg in argv:
        if skip_value:
            skip_value = False
        elif arg == "--max-epochs":
            skip_value = True
        elif not arg.startswith("--max-epochs="):
            kept.append(arg)
    return [*kept, "--max-epochs", str(epochs)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default=None,
                        help="processes on this machine (default: auto; with --resume, the checkpoint's world size)")
    parser.add_argument("--accelerator", default="auto", help="cpu, cuda or auto (default: CUDA if there is one GPU per process, else CPU)")
    parser.add_argument("--accumulate", type=int, default=1, help="accumulate_grad_batches (A)")
    parser.add_argument("--max-epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32, help="micro batch per process (b)")
    parser.add_argument("--lr", type=float, default=None, help="default: per optimizer (OPTIMIZER_DEFAULTS)")
    parser.add_argument("--optimizer", default="adamw", choices=sorted(OPTIMIZER_DEFAULTS),
                        help="lars/larc/lamb/novograd use a 10%% warmup then cosine decay")
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--sync-batchnorm", action="store_true")
    parser.add_argument("--root", default="digits_run", help="default_root_dir (logs, checkpoints)")
    parser.add_argument("--result-json", default=None, help="write the final metrics here (rank 0)")
    parser.add_argument("--resume", default=None, help="fit(ckpt_path=...): 'last', 'best' or a checkpoint file")
    args = parser.parse_args(argv)

    # Set explicitly: OMP_NUM_THREADS set after `import torch` may come too late to count.
    # A model this small only loses time to more threads, so the default is 1.
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    seed_everything(0)
    train, val = digits_datasets()
    devices = _devices(args)
    accelerator = args.accelerator
    if accelerator == "auto" and devices != "auto" and 0 < torch.cuda.device_count() < devices:
        # the README's `--devices 2` demo on a one-GPU machine: two CPU processes rather than an error
        print(f"[digits] --devices {devices} but {torch.cuda.device_count()} CUDA device(s): training on the CPU")
        accelerator = "cpu"
    trainer = Trainer(
        accelerator=accelerator,
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
        ckpt_path=args.resume,
    )
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if "val_acc" not in metrics:  # resumed from a run that had reached --max-epochs: fit trained nothing
        if trainer.is_global_zero:
            again = _with_max_epochs(sys.argv[1:] if argv is None else argv, trainer.current_epoch + args.max_epochs)
            print(f"[digits] {args.resume} had already trained {trainer.current_epoch} epoch(s); to train "
                  f"{args.max_epochs} more: {shlex.join(['python', sys.argv[0], *again])}")
        return
    if trainer.is_global_zero:
        print(f"val_acc={metrics['val_acc']:.4f} val_loss={metrics['val_loss']:.4f} "
              f"world_size={trainer.world_size} global_batch={trainer.global_batch_size} log_dir={trainer.log_dir}")
        if args.result_json:
            with open(args.result_json, "w") as f:
                json.dump({**metrics, "world_size": trainer.world_size, "global_step": trainer.global_step}, f)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
