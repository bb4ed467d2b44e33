"""Gradient accumulation equals one big batch; the shorter last window is a true mean."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.helpers.models import QUIET, Regression, assert_params_close, loader, params_of, regression_data
from trainer import Trainer
from trainer.loops.accumulation_windows import AccumulationWindows


def _fit(module, dataset, batch_size, accumulate, epochs=2, **kw):
    trainer = Trainer(accelerator="cpu", max_epochs=epochs, accumulate_grad_batches=accumulate, **QUIET, **kw)
    trainer.fit(module, loader(dataset, batch_size))
    return trainer


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_batch8_accumulate4_equals_batch32(optimizer):
    data = regression_data(n=96)
    small = Regression(optimizer)
    big = Regression(optimizer)
    t_small = _fit(small, data, batch_size=8, accumulate=4)
    t_big = _fit(big, data, batch_size=32, accumulate=1)
    assert t_small.global_step == t_big.global_step == 6
    assert_params_close(params_of(small), params_of(big), atol=1e-6)


def _manual_sgd(module: nn.Module, windows: list[tuple[torch.Tensor, torch.Tensor]], lr: float) -> None:
    # plain SGD (no momentum) on the mean loss of each window's samples
    opt = torch.optim.SGD(module.parameters(), lr=lr)
    for x, y in windows:
        opt.zero_grad()
        nn.functional.mse_loss(module(x), y).backward()
        opt.step()


class _PlainSGD(Regression):
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_shorter_last_window_is_true_mean():
    # 40 samples, micro batch 8, A=3: windows of 3, 2 micro batches (24 and 16 samples)
    data = regression_data(n=40)
    module = _PlainSGD()
    reference = _PlainSGD()
    trainer = _fit(module, data, batch_size=8, accumulate=3, epochs=1)
    assert trainer.global_step == 2
    x, y = data.tensors
    _manual_sgd(reference, [(x[:24], y[:24]), (x[24:], y[24:])], lr=0.1)
    assert_params_close(params_of(module), params_of(reference), atol=1e-6)


class _Stream(torch.utils.data.IterableDataset):
    """A loader without a length: the last window's size is learned one batch ahead."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __iter__(self):
        x, y = self.dataset.tensors
        for i in range(0, len(x), 8):
            yield x[i : i + 8], y[i : i + 8]


def test_unknown_length_loader_last_window_is_true_mean():
    data = regression_data(n=40)
    module = _PlainSGD()
    reference = _PlainSGD()
    trainer = Trainer(accelerator="cpu", max_epochs=1, accumulate_grad_batches=3, **QUIET)
    trainer.fit(module, torch.utils.data.DataLoader(_Stream(data), batch_size=None))
    assert trainer.global_step == 2
    assert trainer.num_training_batches is None
    x, y = data.tensors
    _manual_sgd(reference, [(x[:24], y[:24]), (x[24:], y[24:])], lr=0.1)
    assert_params_close(params_of(module), params_of(reference), atol=1e-6)


def test_window_arithmetic():
    w = AccumulationWindows(4, num_batches=10)
    ends = [i for i in range(10) if w.is_window_end(i, is_last_batch=i == 9)]
    assert ends == [3, 7, 9]
    assert [w.loss_divisor(i) for i in range(10)] == [4] * 8 + [2, 2]
    assert w.grad_correction(9) == 1.0
    unknown = AccumulationWindows(4, num_batches=None)
    assert unknown.loss_divisor(9) == 4 and unknown.grad_correction(9) == 2.0


def test_optimizer_steps_and_backward_counts():
    calls = {"backward": 0, "step": 0, "zero": 0}

    class Counting(Regression):
        def on_after_backward(self):
            calls["backward"] += 1

        def on_before_optimizer_step(self, optimizer):
            calls["step"] += 1

        def on_before_zero_grad(self, optimizer):
            calls["zero"] += 1

    trainer = _fit(Counting(), regression_data(n=80), batch_size=8, accumulate=4, epochs=1)
    # 10 micro batches -> windows 4, 4, 2
    assert calls == {"backward": 10, "step": 3, "zero": 3}
    assert trainer.global_step == 3


def test_unknown_length_with_a_larger_int_limit_still_corrects_the_last_window():
    data = regression_data(40)
    module, reference = _PlainSGD(), _PlainSGD()
    trainer = Trainer(accelerator="cpu", max_epochs=1, accumulate_grad_batches=3, limit_train_batches=100, **QUIET)
    trainer.fit(module, torch.utils.data.DataLoader(_Stream(data), batch_size=None))
    x, y = data.tensors
    _manual_sgd(reference, [(x[:24], y[:24]), (x[24:], y[24:])], lr=0.1)
    assert_params_close(params_of(module), params_of(reference), atol=1e-6)


def test_the_epochs_accumulation_is_read_once_when_it_starts():
    # A set in the middle of an epoch takes effect at the next epoch's start, for every part of
    # the step (the windows, where an overridden optimizer_zero_grad runs, the sampler's windows)
    from callbacks import Callback

    class SetsAMidEpoch(Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if trainer.current_epoch == 0 and batch_idx == 0:
                trainer.accumulate_grad_batches = 3

    zeroed = []

    class ZeroGradAt(_PlainSGD):
        def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
            zeroed.append((epoch, batch_idx))
            optimizer.zero_grad()

    steps = []

    class Steps(Callback):
        def on_train_epoch_end(self, trainer, module):
            steps.append(trainer.global_step)

    module, reference = ZeroGradAt(), _PlainSGD()
    data = regression_data(n=48)  # 6 micro batches of 8
    _fit(module, data, batch_size=8, accumulate=2, epochs=2, callbacks=[SetsAMidEpoch(), Steps()])
    assert zeroed == [(0, 0), (0, 2), (0, 4), (1, 0), (1, 3)]
    assert steps == [3, 5]
    x, y = data.tensors
    order = [(x[i:i + 16], y[i:i + 16]) for i in (0, 16, 32)] + [(x[:24], y[:24]), (x[24:], y[24:])]
    _manual_sgd(reference, order, lr=0.1)
    assert_params_close(params_of(module), params_of(reference), atol=1e-6)
