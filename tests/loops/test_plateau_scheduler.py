"""ReduceLROnPlateau steps once per new value of its monitor, never twice on the same result."""
from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import Trainer


class _RecordingPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """Records (epoch of the trainer, value) of every step."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.values: list[float] = []

    def step(self, metrics: Any, *args: Any, **kwargs: Any) -> None:
        self.values.append(float(metrics))
        super().step(metrics, *args, **kwargs)


class _Plateau(Regression):
    def __init__(self, lr: float, monitor: str) -> None:
        super().__init__(lr=lr)
        self.monitor = monitor

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("epoch_loss", loss, on_step=False, on_epoch=True)
        return loss

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams["lr"])
        self.plateau = _RecordingPlateau(opt, patience=0, factor=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": self.plateau, "monitor": self.monitor}}


def _fit(lr: float, monitor: str, epochs: int, every: int) -> tuple[_Plateau, Trainer]:
    module = _Plateau(lr, monitor)
    data = loader(regression_data(16), 4)
    trainer = Trainer(accelerator="cpu", max_epochs=epochs, check_val_every_n_epoch=every, num_sanity_val_steps=0, **QUIET)
    trainer.fit(module, data, loader(regression_data(8, seed=1), 4))
    return module, trainer


def test_validation_every_second_epoch_steps_the_plateau_once_per_validation():
    module, trainer = _fit(lr=1e-6, monitor="val_loss", epochs=4, every=2)
    # Validation ran after epochs 1 and 3: two results, two steps. Stepping again after epochs 2
    # and 4 on the old value would count one result twice towards `patience`.
    assert len(module.plateau.values) == 2
    assert module.plateau.values[-1] == pytest.approx(float(trainer.callback_metrics["val_loss"]), abs=0)
    # patience=0, no improvement with lr=1e-6: reduced once (at the second validation), not three times
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.5e-6, rel=1e-12)


def test_a_new_result_equal_to_the_last_one_is_a_new_step():
    # lr=0: every validation gives exactly the same loss, each one is still a new result
    module, _ = _fit(lr=0.0, monitor="val_loss", epochs=3, every=1)
    assert len(module.plateau.values) == 3 and len(set(module.plateau.values)) == 1


def test_a_training_metric_logged_every_epoch_steps_every_epoch():
    module, _ = _fit(lr=1e-6, monitor="epoch_loss", epochs=4, every=2)
    assert len(module.plateau.values) == 4


class _TopLevelMonitor(_Plateau):
    """Lightning's other form: the monitor as the top-level key of configure_optimizers' dict."""

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams["lr"])
        self.plateau = _RecordingPlateau(opt, patience=0, factor=0.5)
        return {"optimizer": opt, "lr_scheduler": self.plateau, "monitor": self.monitor}


def test_the_top_level_monitor_key_drives_a_plateau_scheduler():
    module = _TopLevelMonitor(lr=1e-6, monitor="val_loss")
    trainer = Trainer(accelerator="cpu", max_epochs=3, num_sanity_val_steps=0, **QUIET)
    trainer.fit(module, loader(regression_data(16), 4), loader(regression_data(8, seed=1), 4))
    assert trainer.lr_scheduler_configs[0].monitor == "val_loss"
    # one step per validation, on the logged val_loss; patience=0 and no progress at lr=1e-6: halved twice
    assert len(module.plateau.values) == 3
    assert module.plateau.values[-1] == pytest.approx(float(trainer.callback_metrics["val_loss"]), abs=0)
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.25e-6, rel=1e-12)
