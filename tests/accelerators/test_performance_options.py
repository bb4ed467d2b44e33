"""``Trainer(compile=..., channels_last=..., pin_memory=...)``: checked, applied, and harmless to results."""
from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.models import QUIET, Regression, assert_params_close, loader, params_of, regression_data
from trainer import Trainer, TrainModule
from trainer.accelerators.compilation import is_compiled

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("name", ["compile", "channels_last", "pin_memory"])
def test_flags_must_be_bools(name):
    with pytest.raises(TypeError, match=name):
        Trainer(accelerator="cpu", **{name: 1}, **QUIET)


def _is_channels_last(x: torch.Tensor) -> bool:
    return x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()


class ConvNet(TrainModule):
    """A tiny convolution model that records the memory format it sees."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 1)
        )
        self.seen_channels_last: list[bool] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.seen_channels_last.append(_is_channels_last(x))
        return nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, _ = batch
        self.seen_channels_last.append(_is_channels_last(x))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _images() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(16, 3, 6, 6, generator=g), torch.randn(16, 1, generator=g)),
                      batch_size=4)


def test_channels_last_converts_module_and_4d_batches_and_trains_alike():
    plain, converted = ConvNet(), ConvNet()
    Trainer(accelerator="cpu", max_epochs=2, **QUIET).fit(plain, _images())
    t = Trainer(accelerator="cpu", max_epochs=2, channels_last=True, num_sanity_val_steps=0, **QUIET)
    t.fit(converted, _images(), _images())
    conv_weight = converted.net[0].weight
    assert conv_weight.is_contiguous(memory_format=torch.channels_last) and not conv_weight.is_contiguous()
    assert converted.seen_channels_last and all(converted.seen_channels_last)  # training and validation
    assert not any(plain.seen_channels_last)
    assert_params_close(params_of(converted), params_of(plain), atol=1e-5)


def _compile_works() -> str | None:
    """None when torch.compile can build a CPU kernel here, else why not (e.g. no C++ compiler)."""
    probe = "import torch; f = torch.compile(lambda x: x * 2 + 1); assert f(torch.ones(3)).sum() == 9"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=240)
    if proc.returncode == 0:
        return None
    lines = proc.stderr.strip().splitlines()
    return f"torch.compile does not work on this machine: {lines[-1] if lines else proc.returncode}"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_compile_compiles_the_module_in_place_and_trains_alike():
    reason = _compile_works()
    if reason:
        pytest.skip(reason)
    data = regression_data(32)
    eager, compiled = Regression(), Regression()
    Trainer(accelerator="cpu", max_epochs=1, **QUIET).fit(eager, loader(data, 8))
    t = Trainer(accelerator="cpu", max_epochs=1, compile=True, **QUIET)
    t.fit(compiled, loader(data, 8))
    assert is_compiled(compiled) and t.module is compiled
    assert set(compiled.state_dict()) == set(eager.state_dict())  # in place: no "_orig_mod." prefix
    assert_params_close(params_of(compiled), params_of(eager), atol=1e-5)


def test_compile_is_off_by_default():
    module = Regression()
    Trainer(accelerator="cpu", max_epochs=1, **QUIET).fit(module, loader(regression_data(8), 4))
    assert not is_compiled(module)
