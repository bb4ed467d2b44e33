"""Large-batch training on a synthetic variable-length token task (no download, CPU, < 1 min).

Each sequence holds 2..40 tokens from 1..15 (0 pads); the label of every token says whether it
is smaller than, equal to or larger than the token before it. The loss is the mean over every
*real token* of the global batch, exactly, however the batch is split across processes and
accumulation steps: ``training_step`` returns the summed loss and the token count,
``{"loss": summed, "num_items": tokens}``, and the Trainer normalises the gradients by the
global count at each optimizer step (docs/large-batch.md).

Shown together: a layer-wise optimizer (LAMB, or LARS), ``Trainer(scale_lr=True)`` (the linear
scaling rule: the learning rate is multiplied by the number of processes W), a linear warmup
followed by cosine decay stepped per optimizer step, and the exact token-mean loss with
gradient accumulation.

    python examples/large_batch.py                                # one process
    python examples/large_batch.py --devices 2 --accumulate 2     # 2 processes x 2 micro batches
    python examples/large_batch.py --optimizer lars --scale-lr sqrt
    python examples/large_batch.py --loss per-batch-mean          # the (wrong) mean of means
"""
from __future__ import annotations

import argparse
import json
import math
import os
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from trainer import Trainer, TrainModule, seed_everything

VOCAB, MIN_LEN, MAX_LEN, CLASSES = 16, 2, 40, 3
# Per optimizer: learning rate for one process (W = 1) and options.
OPTIMIZERS: dict[str, tuple[float, dict[str, Any]]] = {
    "lamb": (2e-2, {}),
    "lars": (0.2, {"trust_coefficient": 0.02, "clip": True}),  # LARC (NVIDIA Apex's variant)
}


def make_sequences(n: int, seed: int) -> list[torch.Tensor]:
    """``n`` token sequences of random length in [MIN_LEN, MAX_LEN]."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(MIN_LEN, MAX_LEN + 1, (n,), generator=g).tolist()
    return [torch.randint(1, VOCAB, (length,), generator=g) for length in lengths]


def pad_batch(sequences: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Collate: tokens [B, T] (0-padded), labels [B, T], mask [B, T] (1.0 for real tokens)."""
    tokens = nn.utils.rnn.pad_sequence(sequences, batch_first=True)
    previous = torch.cat([torch.zeros_like(tokens[:, :1]), tokens[:, :-1]], dim=1)
    labels = torch.sign(tokens - previous) + 1  # 0: smaller, 1: equal, 2: larger
    mask = (tokens != 0).float()
    return tokens, labels, mask


class TokenTagger(TrainModule):
    """Embedding, a causal convolution over (previous, current) token, a per-token classifier."""

    def __init__(self, optimizer: str = "lamb", lr: float | None = None, weight_decay: float = 0.01,
                 warmup_fraction: float = 0.1, loss: str = "token-mean") -> None:
        super().__init__()
        if lr is None:
            lr = OPTIMIZERS[optimizer][0]
        self.save_hyperparameters()
        self.embed = nn.Embedding(VOCAB, 32, padding_idx=0)
        self.conv = nn.Conv1d(32, 64, kernel_size=2)
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, CLASSES))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens).transpose(1, 2)  # [B, 32, T]
        h = self.conv(nn.functional.pad(h, (1, 0)))  # causal: position t sees t-1 and t
        return self.head(h.transpose(1, 2))  # [B, T, CLASSES]

    def _token_losses(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        tokens, labels, mask = batch
        logits = self(tokens)
        losses = nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none")
        return logits, labels, mask, losses.view_as(mask) * mask

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        _, _, mask, losses = self._token_losses(batch)
        summed, tokens = losses.sum(), mask.sum()
        self.log("train_loss", summed.detach() / tokens, prog_bar=True)
        if self.hparams["loss"] == "per-batch-mean":
            return summed / tokens  # averaged again over micro batches and ranks: mean of means
        return {"loss": summed, "num_items": tokens}  # exact mean over the global batch's tokens

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        logits, labels, mask, losses = self._token_losses(batch)
        tokens = int(mask.sum())
        correct = ((logits.argmax(-1) == labels).float() * mask).sum()
        # weighted by the token count: the epoch value is the accuracy over all tokens
        self.log("val_loss", losses.sum() / tokens, batch_size=tokens, sync_dist=True)
        self.log("val_acc", correct / tokens, batch_size=tokens, sync_dist=True, prog_bar=True)

    def configure_optimizers(self) -> Any:
        from trainer import optim

        name, lr, wd = self.hparams["optimizer"], self.hparams["lr"], self.hparams["weight_decay"]
        cls = {"lamb": optim.LAMB, "lars": optim.LARS}[name]
        # 1-D tensors (the biases) get no weight decay and no trust ratio (the default exclude_1d).
        opt = cls(self.named_parameters(), lr=lr, weight_decay=wd, **OPTIMIZERS[name][1])
        t = self.trainer
        total = math.ceil(t.num_training_batches / t.accumulate_grad_batches) * t.max_epochs
        warmup_steps = max(1, int(self.hparams["warmup_fraction"] * total))
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, total - warmup_steps))
        sched = optim.warmup(cosine, warmup_steps=warmup_steps, start_factor=0.1)
        # The Trainer scales lr, the warmup and the cosine together when scale_lr is set.
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, default=1, help="processes on this machine (W)")
    parser.add_argument("--accelerator", default="auto", help="cpu, cuda or auto (default: CUDA if available)")
    parser.add_argument("--accumulate", type=int, default=1, help="accumulate_grad_batches (A)")
    parser.add_argument("--batch-size", type=int, default=32, help="micro batch per process (b)")
    parser.add_argument("--max-epochs", type=int, default=3)
    parser.add_argument("--optimizer", default="lamb", choices=sorted(OPTIMIZERS))
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate for W=1 (default: per optimizer)")
    parser.add_argument("--scale-lr", default="linear", choices=["linear", "sqrt", "none"],
                        help="Trainer(scale_lr=...): multiply lr by W, sqrt(W) or 1")
    parser.add_argument("--loss", default="token-mean", choices=["token-mean", "per-batch-mean"],
                        help="token-mean returns num_items (exact); per-batch-mean averages means")
    parser.add_argument("--train-size", type=int, default=2048)
    parser.add_argument("--root", default="large_batch_run", help="default_root_dir (logs, checkpoints)")
    parser.add_argument("--result-json", default=None, help="write the final metrics here (rank 0)")
    args = parser.parse_args(argv)

    # Set explicitly: OMP_NUM_THREADS set after `import torch` may come too late to count.
    # A model this small only loses time to more threads, so the default is 1.
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    seed_everything(0)
    train, val = make_sequences(args.train_size, seed=1), make_sequences(512, seed=2)
    trainer = Trainer(
        accelerator=args.accelerator,
        max_epochs=args.max_epochs,
        devices=args.devices,
        accumulate_grad_batches=args.accumulate,
        scale_lr={"linear": True, "sqrt": "sqrt", "none": False}[args.scale_lr],
        gradient_clip_val=1.0,  # clips the normalised (token-mean) gradients
        default_root_dir=args.root,
        log_every_n_steps=10,
        num_sanity_val_steps=0,
        enable_checkpointing=False,
    )
    model = TokenTagger(optimizer=args.optimizer, lr=args.lr, loss=args.loss)
    trainer.fit(
        model,
        DataLoader(train, batch_size=args.batch_size, shuffle=True, collate_fn=pad_batch),
        DataLoader(val, batch_size=256, collate_fn=pad_batch),
    )
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if trainer.is_global_zero:
        base_lr = trainer.optimizers[0].defaults["lr"]  # as configure_optimizers set it
        peak_lr = trainer.lr_scheduler_configs[0].scheduler.base_lrs[0]  # after scale_lr
        print(f"val_acc={metrics['val_acc']:.4f} val_loss={metrics['val_loss']:.4f} "
              f"world_size={trainer.world_size} global_batch={trainer.global_batch_size} sequences, "
              f"peak lr={peak_lr:.4g} (base {base_lr:.4g}) steps={trainer.global_step}")
        if args.result_json:
            result = {**metrics, "world_size": trainer.world_size, "global_step": trainer.global_step}
            with open(args.result_json, "w") as f:
                json.dump(result, f)


if __name__ == "__main__":
    main()
