"""``val_check_interval`` with ``check_val_every_n_epoch``, every combination, against the installed
Lightning: validation runs after the same training batches (epoch and global step of each run) and the
parameters end equal. With ``check_val_every_n_epoch=None`` the interval counts batches over epochs,
so an int larger than an epoch (25 on a 10-batch epoch) validates at steps 25, 50, ... as Lightning's."""
from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.optional import importorskip

from trainer import Trainer, TrainModule

lightning = importorskip("lightning.pytorch")


def _module_class(base: type) -> type:
    class Model(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(3, 1)
            self.validated_at: list[tuple[int, int]] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            if batch_idx == 0 and not self.trainer.sanity_checking:
                self.validated_at.append((self.trainer.current_epoch, self.trainer.global_step))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    return Model


def _run(trainer_class: type, base: type, interval: int | float, every: int | None) -> tuple[list[Any], dict[str, Any]]:
    torch.manual_seed(0)
    x = torch.randn(19, 3)  # 10 batches of 2, the last one short
    data = TensorDataset(x, x.sum(1, keepdim=True))
    model = _module_class(base)()
    trainer = trainer_class(
        accelerator="cpu", max_epochs=6, val_check_interval=interval, check_val_every_n_epoch=every,
        num_sanity_val_steps=1, limit_val_batches=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(model, DataLoader(data, batch_size=2, shuffle=True), DataLoader(data, batch_size=4))
    return model.validated_at, model.state_dict()


@pytest.mark.parametrize("interval, every", [
    (25, None), (3, None), (10, None), (4, 2), (3, 1), (0.5, 2), (1.0, 3),
])
def test_validation_runs_after_the_batches_lightning_validates_after(interval, every):
    ours, our_params = _run(Trainer, TrainModule, interval, every)
    theirs, their_params = _run(lightning.Trainer, lightning.LightningModule, interval, every)
    assert ours == theirs
    for name, value in their_params.items():
        torch.testing.assert_close(our_params[name], value, atol=1e-5, rtol=1e-5)


def test_an_int_interval_larger_than_an_epoch_validates_every_25_steps_over_epochs():
    ours, _ = _run(Trainer, TrainModule, 25, None)
    assert [step for _, step in ours] == [25, 50]


def test_an_int_interval_larger_than_an_epoch_is_refused_while_validation_counts_per_epoch():
    with pytest.raises(ValueError, match="check_val_every_n_epoch=None"):
        _run(Trainer, TrainModule, 25, 1)


@pytest.mark.parametrize("interval", [0.3, 1.0])
def test_a_fraction_with_check_val_every_n_epoch_none_is_refused_as_lightning_refuses_it(interval):
    with pytest.raises(Exception, match="check_val_every_n_epoch=None"):
        _run(lightning.Trainer, lightning.LightningModule, interval, None)
    with pytest.raises(ValueError, match="check_val_every_n_epoch=None"):
        _run(Trainer, TrainModule, interval, None)
