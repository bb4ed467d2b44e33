"""The same tiny project on Lightning and on Lockstep, for differential tests of callbacks.

`framework(name)` gives ``(L, callbacks)``: Lightning's ``lightning.pytorch`` and its callbacks
module, or Lockstep's ``trainer`` and ``callbacks``. `make_module(L, ...)` defines one module
class on either: a linear regressor on fixed data that also logs scripted values
(``val_metric``, ``train_metric``, ``val/loss``), so the checkpoint schedule can be compared file
for file and the weights to 1e-6.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

QUIET_BOTH = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}


def framework(name: str) -> tuple[Any, Any]:
    """``(L, callbacks module)`` of ``"lightning"`` or ``"lockstep"``."""
    if name == "lightning":
        import lightning.pytorch as L
        import lightning.pytorch.callbacks as cbs

        return L, cbs
    import callbacks as cbs
    import trainer as L

    return L, cbs


def data(n: int = 32, features: int = 4, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    return TensorDataset(x, x @ torch.randn(features, 1, generator=g))


def loaders(batch_size: int = 8) -> tuple[DataLoader, DataLoader]:
    return DataLoader(data(), batch_size=batch_size), DataLoader(data(16, seed=1), batch_size=8)


def make_module(
    L: Any,
    val_script: Sequence[float] = (5.0, 3.0, 4.0, 1.0, 2.0, 6.0),
    lr: float = 0.05,
    backbone: bool = False,
    batchnorm: bool = False,
) -> Any:
    """A module class on framework ``L`` (seeded weights; SGD with momentum).

    ``backbone=True`` splits the net into ``backbone`` and ``head`` (for fine-tuning callbacks);
    ``batchnorm=True`` puts a BatchNorm1d in the backbone (for weight averaging).
    """

    class Scripted(L.LightningModule):
        def __init__(self, batch_size: int = 8, learning_rate: float = lr) -> None:
            super().__init__()
            self.batch_size = batch_size
            self.learning_rate = learning_rate
            torch.manual_seed(0)
            layers: list[nn.Module] = [nn.Linear(4, 8)]
            if batchnorm:
                layers.append(nn.BatchNorm1d(8))
            layers.append(nn.Tanh())
            self.backbone = nn.Sequential(*layers)
            self.head = nn.Linear(8, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.backbone(x))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = nn.functional.mse_loss(self(x), y)
            self.log("train_metric", float(val_script[self.current_epoch % len(val_script)]) + 0.5)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            value = float(val_script[self.current_epoch % len(val_script)])
            self.log("val_metric", value)
            self.log("val/loss", value / 10)
            self.log("val_loss", nn.functional.mse_loss(self(x), y))

        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self(batch[0])

        def train_dataloader(self) -> DataLoader:
            return DataLoader(data(), batch_size=self.batch_size)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(data(16, seed=1), batch_size=8)

        def predict_dataloader(self) -> DataLoader:
            return DataLoader(data(16, seed=1), batch_size=8)

        def configure_optimizers(self) -> Any:
            params = [p for p in self.parameters() if p.requires_grad]
            return torch.optim.SGD(params, lr=self.learning_rate, momentum=0.9)

    return Scripted


def files_under(directory: str | os.PathLike[str]) -> list[str]:
    """Every file (and link) under ``directory``, relative, sorted."""
    out = []
    for root, _, names in os.walk(directory):
        out += [os.path.relpath(os.path.join(root, n), directory) for n in names]
    return sorted(out)


def fit(name: str, callbacks: list[Any], epochs: int = 3, module: Any = None, ckpt_path: Any = None,
        **trainer_args: Any) -> tuple[Any, Any]:
    """Fit ``module`` (default: `make_module`'s) on framework ``name``, from ``ckpt_path`` if given: (trainer, module)."""
    L, _ = framework(name)
    model = module if module is not None else make_module(L)()
    settings = {**QUIET_BOTH, "num_sanity_val_steps": 0, "enable_checkpointing": False, **trainer_args}
    if any(type(cb).__name__ == "ModelCheckpoint" for cb in callbacks):
        settings["enable_checkpointing"] = True
    trainer = L.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, callbacks=callbacks, **settings)
    trainer.fit(model, ckpt_path=ckpt_path)
    return trainer, model
