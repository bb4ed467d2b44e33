"""Modules for the FSDP tests (importable by the spawned ranks)."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tests.helpers.models import Regression

# (model, list) while a test measures the parameter bytes a rank holds during materialization
PROBE: dict[str, Any] = {}


def local_param_bytes(model: nn.Module) -> int:
    """Parameter bytes this rank holds now: DTensor local shards, plain tensors, nothing on meta."""
    total = 0
    for p in model.parameters():
        t = p.to_local() if hasattr(p, "to_local") else p
        if not t.is_meta:
            total += t.numel() * t.element_size()
    return total


class ProbeLinear(nn.Linear):
    """Records, each time it is initialized, the parameter bytes materialized on the rank."""

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if PROBE:
            PROBE["seen"].append(local_param_bytes(PROBE["model"]))


class MetaRegression(Regression):
    """`Regression`, its layers built in ``configure_model`` (idempotent by the Trainer's guard)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        del self.net  # built in configure_model, from the same seed
        torch.manual_seed(self.hparams["seed"])
        self.configured = 0

    def configure_model(self) -> None:
        self.configured += 1
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


class Block(nn.Module):
    def __init__(self, width: int, linear: type = nn.Linear) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(self.norm(x)))


class Blocks(Regression):
    """A residual stack of `Block`s; ``meta=True`` builds it in ``configure_model``."""

    def __init__(self, depth: int = 3, width: int = 4, meta: bool = False, linear: type = nn.Linear, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.depth, self.width, self.meta, self.linear = depth, width, meta, linear
        if not meta:
            self.net = self._build()

    def _build(self) -> nn.Module:
        return nn.Sequential(*[Block(self.width, self.linear) for _ in range(self.depth)], nn.Linear(self.width, 1))

    def configure_model(self) -> None:
        if self.meta:
            self.net = self._build()


class SumLoss(Regression):
    """Returns the summed loss and its item count: the loop normalizes by the global count."""

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return {"loss": ((self(x) - y) ** 2).sum(), "num_items": x.shape[0]}


class ManualAccumulation(Regression):
    """Manual optimization: two half batches, the first backward without gradient sync."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        x, y = batch
        half = x.shape[0] // 2
        with self.no_backward_sync():
            self.manual_backward(nn.functional.mse_loss(self(x[:half]), y[:half]) / 2)
        self.manual_backward(nn.functional.mse_loss(self(x[half:]), y[half:]) / 2)
        opt.step()
        opt.zero_grad()


class BatchNormRegression(Regression):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 1))


class NoReset(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


class MetaWithoutReset(Regression):
    def configure_model(self) -> None:
        self.extra = NoReset()


class DtypeProbe(Regression):
    """Records the dtype the first layer's weight has inside training_step."""

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.seen_dtype = self.net[0].weight.dtype
        return super().training_step(batch, batch_idx)
