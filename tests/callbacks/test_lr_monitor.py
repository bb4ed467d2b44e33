"""LearningRateMonitor: names, values and cadence through a real logger."""

from __future__ import annotations

import pytest
import torch

from callbacks import CSVLogger, LearningRateMonitor, Logger
from tests.helpers.callbacks import Scripted, loader
from trainer import Trainer


class _MemoryLogger(Logger):
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics, step):
        self.rows.append((step, dict(metrics)))

    def series(self, key):
        return [(step, m[key]) for step, m in self.rows if key in m]


def _fit(monitor, module, epochs=3, log_every_n_steps=1, logger=None):
    logger = logger or _MemoryLogger()
    trainer = Trainer(accelerator="cpu",
        max_epochs=epochs,
        callbacks=[monitor],
        logger=logger,
        log_every_n_steps=log_every_n_steps,
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    trainer.fit(module, loader(16, 8))  # 2 optimizer steps per epoch
    return logger


def test_epoch_scheduler_logged_at_epoch_start():
    logger = _fit(LearningRateMonitor(), Scripted(lr=0.1, scheduler="epoch"))
    assert logger.series("lr-SGD") == [(0, 0.1), (2, 0.05), (4, 0.025)]


def test_step_scheduler_logged_every_log_every_n_steps():
    monitor = LearningRateMonitor()
    logger = _fit(monitor, Scripted(lr=0.1, scheduler="step"), epochs=2, log_every_n_steps=2)
    # steps 0..3: logged, as Lightning, before the step that completes every 2nd one ((step + 1) % 2 == 0)
    assert [step for step, _ in logger.series("lr-SGD")] == [1, 3]
    assert [v for _, v in logger.series("lr-SGD")] == pytest.approx([0.1 * 0.9, 0.1 * 0.9**3])
    assert monitor.lrs["lr-SGD"] == pytest.approx([0.09, 0.0729])


def test_forced_interval_and_optimizer_without_scheduler():
    logger = _fit(LearningRateMonitor("epoch"), Scripted(lr=0.3), epochs=2)
    assert logger.series("lr-SGD") == [(0, 0.3), (2, 0.3)]
    logger = _fit(LearningRateMonitor(), Scripted(lr=0.3), epochs=1)  # no scheduler: every step
    assert logger.series("lr-SGD") == [(0, 0.3), (1, 0.3)]


class _TwoOptimizers(Scripted):
    def configure_optimizers(self):
        first = torch.optim.SGD(
            [{"params": [self.net.weight], "lr": 0.1}, {"params": [self.net.bias], "lr": 0.2, "name": "bias"}]
        )
        return [first, torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.5)]


def test_param_group_and_duplicate_optimizer_names():
    logger = _fit(LearningRateMonitor("epoch"), _TwoOptimizers(), epochs=1)
    assert [row for row in logger.rows if "epoch" not in row[1]] == [
        (0, {"lr-SGD/pg1": 0.1, "lr-SGD/bias": 0.2, "lr-SGD-1": 0.5})
    ]


def test_values_reach_csv(tmp_path):
    logger = _fit(
        LearningRateMonitor(), Scripted(lr=0.1, scheduler="epoch"), epochs=2, logger=CSVLogger(tmp_path)
    )
    text = open(logger.metrics_file_path).read()
    assert text.splitlines()[0].startswith("step,lr-SGD") and "0.05" in text


def test_needs_a_logger():
    trainer = Trainer(accelerator="cpu",
        max_epochs=1,
        callbacks=[LearningRateMonitor()],
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    with pytest.raises(
        ValueError, match=r"LearningRateMonitor needs a logger: the Trainer has none \(logger=False\)"
    ):
        trainer.fit(Scripted(), loader(16, 8))


def test_bad_interval():
    with pytest.raises(
        ValueError, match=r"LearningRateMonitor\(logging_interval='batch'\): use None, 'step' or 'epoch'"
    ):
        LearningRateMonitor("batch")


def test_the_default_monitor_keeps_the_rates_out_of_callback_metrics():
    # Lightning adds no monitor by default, so its callback_metrics hold no learning rates
    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=_MemoryLogger(), enable_progress_bar=False,
                      enable_checkpointing=False, log_every_n_steps=1)
    trainer.fit(Scripted(lr=0.1), loader(16, 8))
    assert any(isinstance(cb, LearningRateMonitor) for cb in trainer.callbacks)
    assert not [k for k in trainer.callback_metrics if k.startswith("lr-")]
    with pytest.raises(TypeError, match="to_callback_metrics"):
        LearningRateMonitor(to_callback_metrics="no")
