"""Small modules and data shared by the tests."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import TrainModule, Trainer

# The quiet Trainer settings, defined once for the whole suite (tests, spawned ranks, scripts):
# no logger, no progress bar, no checkpointing, no model summary. Each Trainer call still names
# its accelerator (tests/project/test_suite_portability.py checks it).
QUIET = {"logger": False, "enable_progress_bar": False, "enable_checkpointing": False, "enable_model_summary": False}


def regression_data(n: int = 64, features: int = 4, seed: int = 0) -> TensorDataset:
    """A small linear-regression dataset (deterministic)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, 1, generator=g)
    return TensorDataset(x, x @ w + 0.1 * torch.randn(n, 1, generator=g))


class Regression(TrainModule):
    """A two-layer MLP regressor; ``optimizer`` is "sgd" (with momentum) or "adamw"."""

    def __init__(self, optimizer: str = "sgd", lr: float = 0.05, features: int = 4, seed: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(features, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_loss", nn.functional.mse_loss(self(x), y))

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, _ = batch
        return self(x)

    def configure_optimizers(self) -> Any:
        if self.hparams["optimizer"] == "adamw":
            return torch.optim.AdamW(self.parameters(), lr=self.hparams["lr"], weight_decay=0.01)
        return torch.optim.SGD(self.parameters(), lr=self.hparams["lr"], momentum=0.9)


def loader(dataset: TensorDataset, batch_size: int, shuffle: bool = False, **kwargs: Any) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, **kwargs)


def params_of(module: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def assert_params_close(a: list[torch.Tensor], b: list[torch.Tensor], atol: float) -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        diff = (x - y).abs().max().item()
        assert diff <= atol, f"parameter {i} differs by {diff} > {atol}"


def one_process_regression(global_batch: int) -> dict[str, Any]:
    """`Regression` fitted in one process, 2 epochs on `regression_data(32)` with batch ``global_batch``:
    the parameters and step count a distributed run with that global batch must end with."""
    module = Regression("sgd")
    trainer = Trainer(accelerator="cpu", max_epochs=2, **QUIET)
    trainer.fit(module, loader(regression_data(32), global_batch))
    return {"params": params_of(module), "global_step": trainer.global_step}
