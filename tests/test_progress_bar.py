"""ProgressBar: periodic lines off a terminal, tqdm on one, and no per-step metric reads."""

from __future__ import annotations

import io
import re

import pytest
from callback_helpers import Scripted, loader

from callbacks import ProgressBar
from trainer import Trainer


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _CountingTrainer(Trainer):
    """Counts reads of ``progress_bar_metrics`` (each one syncs with the device)."""

    reads = 0

    @property
    def progress_bar_metrics(self):
        self.reads += 1
        return super().progress_bar_metrics


def _fit(bar, epochs=1, n=80, val=True, trainer_cls=Trainer):
    trainer = trainer_cls(
        max_epochs=epochs, callbacks=[bar], logger=False, enable_checkpointing=False, num_sanity_val_steps=2
    )
    trainer.fit(Scripted(prog_bar=True), loader(n, 4), loader(8, 4) if val else None)
    return trainer


def test_non_tty_prints_periodic_single_lines():
    out = io.StringIO()
    _fit(ProgressBar(file=out, line_every_percent=25), epochs=2)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    epoch0 = [line for line in lines if line.startswith("Epoch 0:")]
    assert [re.search(r"(\d+)% (\d+)/20", line).group(1, 2) for line in epoch0] == [
        ("25", "5"),
        ("50", "10"),
        ("75", "15"),
        ("100", "20"),
    ]
    for line in epoch0:
        assert re.search(r"[\d.]+it/s\]", line) and "train_loss=" in line and "loss=" in line
    assert "val_loss=" in epoch0[-1]  # the epoch-end line comes after the epoch's validation
    assert len([line for line in lines if line.startswith("Validation:")]) == 2  # one per epoch
    assert not any(line.startswith("Sanity") for line in lines)
    assert len(lines) == 2 * 4 + 2


def test_metrics_are_read_only_on_refresh():
    # one read per printed line, none per step
    bar = ProgressBar(file=io.StringIO(), line_every_percent=50, min_interval_s=3600)
    trainer = _fit(bar, n=80, trainer_cls=_CountingTrainer)
    assert trainer.reads == 3  # 50 % line, validation line, epoch-end line; 20 batches

    bar = ProgressBar(file=_Terminal(), min_interval_s=3600)
    trainer = _fit(bar, n=80, trainer_cls=_CountingTrainer)
    # tty: the first refresh, the validation bar's first refresh and close, the sanity bar's
    # first refresh and close, and the epoch bar's close
    assert trainer.reads <= 6


def test_tty_draws_tqdm_bars():
    out = _Terminal()
    _fit(ProgressBar(file=out), epochs=2)
    text = out.getvalue()
    assert "\r" in text
    assert "Epoch 0: 100%" in text and "Epoch 1: 100%" in text
    assert "Validation" in text and "Sanity Checking" in text
    assert "it/s" in text and "train_loss=" in text


def test_refresh_rate_zero_disables_the_bar():
    out = io.StringIO()
    _fit(ProgressBar(refresh_rate=0, file=out))
    assert out.getvalue() == ""


def test_default_bar_goes_to_stdout(capsys):
    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False)
    assert any(isinstance(cb, ProgressBar) for cb in trainer.callbacks)
    trainer.fit(Scripted(), loader(16, 4))
    assert "Epoch 0: 100% 4/4" in capsys.readouterr().out


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"refresh_rate": -1}, r"ProgressBar\(refresh_rate=-1\): expected an int >= 0"),
        ({"min_interval_s": -0.5}, r"ProgressBar\(min_interval_s=-0.5\): expected a number >= 0"),
        ({"line_every_percent": 0}, r"ProgressBar\(line_every_percent=0\): expected 0 < value <= 100"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ProgressBar(**kwargs)
