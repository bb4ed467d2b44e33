"""A small transformer trained with FSDP: every rank holds half the weights (CPU, seconds).

The model is built in ``configure_model``: under ``strategy="fsdp"`` its layers are created on
the meta device and each rank materializes only its shards, so the whole model never exists on
one rank. Each `Block` is its own FSDP unit (gathered for its forward and backward, freed after).

The task: every sequence repeats its first half, so from the middle on the next token can be
copied from half a sequence back; a causal model learns to attend there. The loss of the second
half falls from about ln(16) = 2.8 to near 0.

    python examples/fsdp_example.py --devices 2
    python examples/fsdp_example.py --devices 2 --activation-checkpointing --precision bf16-mixed
"""
from __future__ import annotations

import argparse
import json
import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from trainer import FSDPStrategy, Trainer, TrainModule, seed_everything

VOCAB, LENGTH = 16, 16


class Block(nn.Module):
    """Pre-norm causal self-attention and MLP (plain layers: each has ``reset_parameters``)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, c // self.heads).unbind(2)
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


class TinyTransformer(TrainModule):
    def __init__(self, width: int = 32, depth: int = 2, heads: int = 2, lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model: nn.Module | None = None
        self.epoch_losses: list[float] = []

    def configure_model(self) -> None:
        h = self.hparams
        self.model = nn.ModuleDict({
            "tokens": nn.Embedding(VOCAB, h["width"]),
            "positions": nn.Embedding(LENGTH, h["width"]),
            "blocks": nn.Sequential(*[Block(h["width"], h["heads"]) for _ in range(h["depth"])]),
            "norm": nn.LayerNorm(h["width"]),
            "head": nn.Linear(h["width"], VOCAB),
        })

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        m = self.model
        x = m["tokens"](tokens) + m["positions"](torch.arange(tokens.shape[1], device=tokens.device))
        return m["head"](m["norm"](m["blocks"](x)))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (tokens,) = batch
        logits = self(tokens[:, :-1])[:, LENGTH // 2 - 1 :]  # predict the repeated half
        loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), tokens[:, LENGTH // 2 :].reshape(-1))
        self.log("train_loss", loss, on_epoch=True, prog_bar=True)
        return loss

    def on_train_epoch_end(self) -> None:
        self.epoch_losses.append(float(self.trainer.callback_metrics["train_loss_epoch"]))

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams["lr"])


def repeated_sequences(n: int, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    half = torch.randint(0, VOCAB, (n, LENGTH // 2), generator=g)
    return TensorDataset(torch.cat([half, half], dim=1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=2, help="processes on this machine (W)")
    parser.add_argument("--accelerator", default="auto", help="cpu, cuda or auto")
    parser.add_argument("--precision", default="32-true", choices=["32-true", "bf16-mixed", "bf16-true"])
    parser.add_argument("--activation-checkpointing", action="store_true", help="recompute each Block in backward")
    parser.add_argument("--max-epochs", type=int, default=4)
    parser.add_argument("--train-size", type=int, default=1024, help="sequences per epoch")
    parser.add_argument("--root", default="fsdp_run", help="default_root_dir")
    parser.add_argument("--result-json", default=None, help="write the epoch losses here (rank 0)")
    args = parser.parse_args(argv)

    seed_everything(0)
    strategy = FSDPStrategy(auto_wrap_policy={Block}, activation_checkpointing_policy=args.activation_checkpointing)
    trainer = Trainer(
        accelerator=args.accelerator, devices=args.devices, strategy=strategy, precision=args.precision,
        max_epochs=args.max_epochs, default_root_dir=args.root, enable_checkpointing=False,
        enable_progress_bar=False, logger=False,
    )
    module = TinyTransformer()
    trainer.fit(module, DataLoader(repeated_sequences(args.train_size), batch_size=32, shuffle=True))
    if trainer.is_global_zero:
        losses = module.epoch_losses
        print(f"train loss per epoch: {[round(x, 3) for x in losses]} (ln {VOCAB} = {math.log(VOCAB):.2f})")
        if args.result_json:
            with open(args.result_json, "w") as f:
                json.dump({"losses": losses, "world_size": trainer.world_size}, f)


if __name__ == "__main__":
    main()
