"""GradientAccumulationScheduler: validation of the schedule, and A changing by epoch in a fit."""

from __future__ import annotations

import pytest

from callbacks import GradientAccumulationScheduler
from tests.helpers.callbacks import Recorder, Scripted, loader
from tests.helpers.models import QUIET
from trainer import Trainer


def test_schedule_lookup():
    gas = GradientAccumulationScheduler({4: 2, 8: 4})
    assert gas.scheduling == {0: 1, 4: 2, 8: 4}
    assert [gas.get_accumulate_grad_batches(e) for e in range(10)] == [1, 1, 1, 1, 2, 2, 2, 2, 4, 4]


def test_accumulation_changes_by_epoch():
    recorder = Recorder()
    trainer = Trainer(accelerator="cpu",
        max_epochs=4, callbacks=[GradientAccumulationScheduler({0: 1, 1: 2, 2: 4}), recorder], **QUIET
    )
    trainer.fit(Scripted(), loader(64, 4))  # 16 micro batches per epoch
    assert recorder.optimizer_steps_per_epoch() == [16, 8, 4, 4]
    assert trainer.global_step == 32 and trainer.accumulate_grad_batches == 4


def test_conflicts_with_trainer_argument():
    trainer = Trainer(accelerator="cpu",
        max_epochs=1,
        accumulate_grad_batches=2,
        callbacks=[GradientAccumulationScheduler({0: 4})],
        **QUIET,
    )
    with pytest.raises(
        ValueError,
        match=r"Trainer\(accumulate_grad_batches=2\) and GradientAccumulationScheduler "
        r"both set the accumulation",
    ):
        trainer.fit(Scripted(), loader(16, 4))


def test_second_fit_of_same_trainer_is_not_a_conflict():
    trainer = Trainer(accelerator="cpu", max_epochs=2, callbacks=[GradientAccumulationScheduler({1: 2})], **QUIET)
    trainer.fit(Scripted(), loader(16, 4))
    trainer.fit(Scripted(), loader(16, 4))
    assert trainer.global_step == 6


@pytest.mark.parametrize(
    "scheduling, error, message",
    [
        ({}, ValueError, r"scheduling=\{\}\) is empty"),
        ([(0, 2)], TypeError, r"expects a dict \{epoch: accumulate\}, got list"),
        ({-1: 2}, ValueError, r"epoch keys must be ints >= 0 \(0-based\), got -1"),
        ({"1": 2}, TypeError, r"epoch keys must be ints >= 0 \(0-based\), got '1'"),
        ({0: 0}, ValueError, r"accumulation values must be ints >= 1, got 0 for epoch 0"),
        ({2: 1.5}, TypeError, r"accumulation values must be ints >= 1, got 1.5 for epoch 2"),
        ({1: True}, TypeError, r"accumulation values must be ints >= 1, got True for epoch 1"),
    ],
)
def test_bad_schedules(scheduling, error, message):
    with pytest.raises(error, match=message):
        GradientAccumulationScheduler(scheduling)
