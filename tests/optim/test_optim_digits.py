"""Each large-batch optimizer trains the digits example to >= 95% validation accuracy through the
Trainer, with the example's defaults (``examples/digits.py``: per-optimizer learning rate, 10%
linear warmup from lr/10, then cosine decay stepped per optimizer step). One process, 8 epochs."""
from __future__ import annotations

import importlib.util
import sys

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.distributed import REPO_ROOT
from trainer import Trainer, seed_everything
from trainer.optim import LAMB, LARS, LinearWarmup, NovoGrad

pytest.importorskip("sklearn")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

EPOCHS = 8  # seeds 0-4 reached 0.972-0.994 with every optimizer below


def _load_digits_example():
    name = "lockstep_examples_digits"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "examples" / "digits.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.mark.parametrize(
    "name, cls, options",
    [
        ("lars", LARS, {"clip": False}),
        ("larc", LARS, {"clip": True, "trust_coefficient": 0.02}),
        ("lamb", LAMB, {}),
        ("novograd", NovoGrad, {}),
    ],
)
def test_optimizer_trains_digits_to_95_percent(name, cls, options):
    digits = _load_digits_example()
    torch.set_num_threads(1)
    seed_everything(0)
    train, val = digits.digits_datasets()
    class Recorded(digits.DigitsCNN):
        """The example's model, recording group 0's learning rate at every optimizer step."""

        lrs: list[float] = []

        def on_before_optimizer_step(self, optimizer):
            self.lrs.append(float(optimizer.param_groups[0]["lr"]))

    model = Recorded(optimizer=name)
    trainer = Trainer(accelerator="cpu",
        max_epochs=EPOCHS,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=EPOCHS,
    )
    trainer.fit(model, DataLoader(train, batch_size=64, shuffle=True), DataLoader(val, batch_size=512))

    assert float(trainer.callback_metrics["val_acc"]) >= 0.95
    # The example's defaults are what ran: the optimizer and its options, warmup then cosine per step.
    opt = trainer.optimizers[0]
    assert type(opt) is cls
    assert all(opt.defaults[k] == v for k, v in options.items())
    peak = digits.OPTIMIZER_DEFAULTS[name][0]
    assert opt.defaults["lr"] == peak
    (config,) = trainer.lr_scheduler_configs
    assert isinstance(config.scheduler, LinearWarmup) and config.interval == "step"
    lrs = model.lrs
    warmup_steps = len(lrs) // 10
    assert len(lrs) == trainer.global_step == EPOCHS * 23  # 1,437 samples / 64 = 23 steps per epoch
    assert lrs[0] == pytest.approx(0.1 * peak)
    assert lrs[warmup_steps] == pytest.approx(peak) and max(lrs) == pytest.approx(peak)
    assert lrs[-1] < 0.01 * peak
