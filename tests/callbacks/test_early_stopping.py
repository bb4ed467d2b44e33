"""EarlyStopping (one process): patience, min_delta, thresholds, non-finite values, state."""

from __future__ import annotations

import pytest

from callbacks import EarlyStopping
from tests.helpers.callbacks import Scripted, loader
from tests.helpers.models import QUIET
from trainer import Trainer


def _fit(stopper, module, epochs=10, val=True, **kwargs):
    trainer = Trainer(accelerator="cpu",
        max_epochs=epochs, callbacks=[stopper], num_sanity_val_steps=0, **{**QUIET, **kwargs}
    )
    trainer.fit(module, loader(16, 8), loader(8, 8) if val else None)
    return trainer


def test_stops_after_patience_checks_without_improvement():
    stopper = EarlyStopping("val_metric", patience=2)
    trainer = _fit(stopper, Scripted(val_script=[5, 4, 4.5, 4.2, 1, 0, 0, 0, 0, 0]))
    assert stopper.stopped_epoch == 3 and trainer.current_epoch == 4  # epochs 0-3 ran
    assert stopper.best_score == 4.0 and stopper.wait_count == 2
    assert "did not improve in the last 2 records" in stopper.stopping_reason


def test_min_delta_and_mode_max():
    # improvements of 0.05 do not count with min_delta=0.1
    stopper = EarlyStopping("val_metric", mode="max", patience=2, min_delta=0.1)
    _fit(stopper, Scripted(val_script=[1.0, 1.05, 1.5, 1.55, 1.58, 9, 9, 9, 9, 9]))
    assert stopper.stopped_epoch == 4 and stopper.best_score == 1.5


def test_improvement_resets_the_wait():
    stopper = EarlyStopping("val_metric", patience=2)
    trainer = _fit(stopper, Scripted(val_script=[5, 6, 4, 6, 3, 6, 2, 6]), epochs=8)
    assert trainer.current_epoch == 8 and not trainer.should_stop and stopper.best_score == 2


def test_non_finite_value_stops_at_once():
    stopper = EarlyStopping("val_metric", patience=5)
    _fit(stopper, Scripted(val_script=[5, 4, float("nan"), 3, 2]), epochs=5)
    assert stopper.stopped_epoch == 2 and "is not finite" in stopper.stopping_reason

    stopper = EarlyStopping("val_metric", patience=2, check_finite=False)
    _fit(stopper, Scripted(val_script=[5, float("inf"), float("inf"), 3, 2]), epochs=5)
    assert stopper.stopped_epoch == 2  # only patience ran out


def test_stopping_and_divergence_thresholds():
    stopper = EarlyStopping("val_metric", patience=5, stopping_threshold=1.0)
    _fit(stopper, Scripted(val_script=[5, 3, 0.9, 0.5]))
    assert stopper.stopped_epoch == 2 and "Stopping threshold reached" in stopper.stopping_reason

    stopper = EarlyStopping("val_metric", patience=5, divergence_threshold=10.0)
    _fit(stopper, Scripted(val_script=[5, 3, 11, 0.5]))
    assert stopper.stopped_epoch == 2 and "Divergence threshold reached" in stopper.stopping_reason


def test_train_metric_is_checked_at_train_epoch_end():
    stopper = EarlyStopping("train_metric", patience=1)
    trainer = _fit(stopper, Scripted(train_script=[3, 2, 2, 1, 0]), val=False)
    assert stopper.stopped_epoch == 2 and trainer.current_epoch == 3


def test_verbose_prints_the_reason(capsys):
    _fit(EarlyStopping("val_metric", patience=1, verbose=True), Scripted(val_script=[2, 3, 1]))
    out = capsys.readouterr().out
    assert "New best score: 2" in out and "did not improve in the last 1 records" in out


def test_monitor_missing_lists_available_keys():
    with pytest.raises(
        KeyError,
        match=r"EarlyStopping\(monitor='val_acc'\) could not find 'val_acc' in the "
        r"logged metrics\. Available keys: train_loss\.",
    ):
        _fit(EarlyStopping("val_acc"), Scripted(), val=False)


def test_state_dict_round_trip():
    stopper = EarlyStopping("val_metric", patience=3)
    _fit(stopper, Scripted(val_script=[5, 4, 6, 7]), epochs=4)
    state = stopper.state_dict()
    assert state == {"wait_count": 2, "stopped_epoch": 0, "best_score": 4.0, "patience": 3}
    fresh = EarlyStopping("val_metric", patience=3)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"monitor": ""}, r"EarlyStopping\(monitor=''\): expected the name of a logged metric"),
        (
            {"monitor": "x", "mode": "lowest"},
            r"EarlyStopping\(mode='lowest'\) is not supported: use 'min' or 'max'",
        ),
        ({"monitor": "x", "patience": -1}, r"EarlyStopping\(patience\) must be an int >= 0, got -1"),
        (
            {"monitor": "x", "min_delta": -0.1},
            r"EarlyStopping\(min_delta\) must be a finite number >= 0, got -0.1",
        ),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EarlyStopping(**kwargs)
