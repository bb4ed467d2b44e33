"""`trainer.tuner.Tuner` against Lightning's: the same range test (rates and smoothed losses to
1e-6, the same suggestion) and the same batch sizes found, on seeded problems."""
from __future__ import annotations

import pytest
import torch

from tests.helpers.lightning_parity import QUIET_BOTH, framework, make_module
from tests.helpers.optional import importorskip

importorskip("lightning", reason="needs `lightning` (the bench extra: pip install -e '.[bench]')")

OOM = "DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes (simulated)"


def _tuner(name):
    if name == "lightning":
        from lightning.pytorch.tuner import Tuner
    else:
        from trainer.tuner import Tuner
    return Tuner


def _trainer(name, **kwargs):
    L, _ = framework(name)
    return L.Trainer(accelerator="cpu", devices=1, enable_checkpointing=False, num_sanity_val_steps=0, **QUIET_BOTH, **kwargs)


def _lr_find(name, max_lr=10.0, **kwargs):
    L, _ = framework(name)
    torch.manual_seed(0)
    model = make_module(L)(learning_rate=0.01)
    before = [p.detach().clone() for p in model.parameters()]
    finder = _tuner(name)(_trainer(name)).lr_find(model, num_training=30, min_lr=1e-4, max_lr=max_lr, **kwargs)
    for a, b in zip(before, model.parameters()):  # the module has its weights back
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    return finder, model


@pytest.mark.parametrize("mode", ["exponential", "linear"])
def test_lr_find_matches_lightning(mode):
    max_lr = 10.0 if mode == "exponential" else 0.05
    ours, our_model = _lr_find("lockstep", max_lr=max_lr, mode=mode)
    theirs, their_model = _lr_find("lightning", max_lr=max_lr, mode=mode)
    assert len(ours.results["lr"]) == len(theirs.results["lr"]) > 12
    torch.testing.assert_close(torch.tensor(ours.results["lr"]), torch.tensor(theirs.results["lr"]), rtol=1e-6, atol=0)
    torch.testing.assert_close(torch.tensor(ours.results["loss"]), torch.tensor(theirs.results["loss"]), rtol=1e-6, atol=1e-7)
    assert ours.suggestion() == pytest.approx(theirs.suggestion(), rel=1e-6)
    assert our_model.learning_rate == pytest.approx(their_model.learning_rate, rel=1e-6) != 0.01  # update_attr


def test_lr_find_plot_is_a_figure():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    finder, _ = _lr_find("lockstep", update_attr=False)
    figure = finder.plot(suggest=True)
    assert isinstance(figure, matplotlib.figure.Figure) and figure.axes[0].get_xscale() == "log"


def _oom_module(L, limit):
    class Limited(make_module(L)):
        def training_step(self, batch, batch_idx):
            if len(batch[0]) > limit:
                raise RuntimeError(OOM)
            return super().training_step(batch, batch_idx)

    return Limited


@pytest.mark.parametrize("mode, limit, expected", [("power", 100, 32), ("power", 12, 8), ("binsearch", 12, 11)])
def test_scale_batch_size_matches_lightning(mode, limit, expected):
    found = {}
    for name in ("lightning", "lockstep"):
        L, _ = framework(name)
        model = _oom_module(L, limit)(batch_size=2)
        before = [p.detach().clone() for p in model.parameters()]
        found[name] = _tuner(name)(_trainer(name, max_epochs=1)).scale_batch_size(model, mode=mode, steps_per_trial=1)
        assert model.batch_size == found[name]
        for a, b in zip(before, model.parameters()):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert found["lockstep"] == found["lightning"] == expected


def test_finder_callbacks():
    L, cbs = framework("lockstep")
    sizes = cbs.BatchSizeFinder(mode="binsearch", steps_per_trial=1)
    rates = cbs.LearningRateFinder(min_lr=1e-4, max_lr=10.0, num_training_steps=30)
    model = _oom_module(L, 12)(batch_size=2, learning_rate=0.01)
    trainer = _trainer("lockstep", max_epochs=10, max_steps=1, callbacks=[sizes, rates])
    trainer.fit(model)
    assert sizes.optimal_batch_size == model.batch_size == 11 and trainer.micro_batch_size == 11
    assert model.learning_rate == rates.optimal_lr.suggestion() and trainer.optimizers[0].param_groups[0]["lr"] == model.learning_rate


def test_loaders_passed_directly_are_refused():
    from tests.helpers.lightning_parity import loaders
    from trainer.tuner import Tuner

    L, _ = framework("lockstep")
    with pytest.raises(ValueError, match="cannot change the batch size of loaders passed to it"):
        Tuner(_trainer("lockstep")).scale_batch_size(make_module(L)(), loaders()[0])


# -- bad arguments: refused by name before any trial runs or anything changes ----------------------
def _counting_module(L):
    class Counting(make_module(L)):
        steps = 0

        def training_step(self, batch, batch_idx):
            self.steps += 1
            return super().training_step(batch, batch_idx)

    return Counting


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"num_training": 0}, ValueError, "lr_find(num_training) must be an int >= 1, got 0"),
        ({"num_training": -5}, ValueError, "lr_find(num_training) must be an int >= 1, got -5"),
        ({"num_training": 2.5}, TypeError, "lr_find(num_training) must be an int >= 1, got 2.5"),
        ({"min_lr": 0.0}, ValueError, "lr_find(min_lr) must be a finite number > 0, got 0.0"),
        ({"min_lr": -1e-3}, ValueError, "lr_find(min_lr) must be a finite number > 0, got -0.001"),
        ({"max_lr": float("nan")}, ValueError, "lr_find(max_lr) must be a finite number > 0, got nan"),
        ({"max_lr": float("inf")}, ValueError, "lr_find(max_lr) must be a finite number > 0, got inf"),
        ({"max_lr": "1"}, TypeError, "lr_find(max_lr) must be a finite number > 0, got '1'"),
        (
            {"min_lr": 0.1, "max_lr": 0.01}, ValueError,
            "lr_find(min_lr=0.1, max_lr=0.01): min_lr must be below max_lr",
        ),
        ({"mode": "log"}, ValueError, "lr_find(mode='log'): use 'exponential' or 'linear'"),
        (
            {"early_stop_threshold": 0}, ValueError,
            "lr_find(early_stop_threshold) must be None or a finite number > 0, got 0",
        ),
        ({"early_stop_threshold": float("nan")}, ValueError, "must be None or a finite number > 0, got nan"),
        ({"update_attr": "yes"}, TypeError, "lr_find(update_attr) must be a bool (True or False), got 'yes'"),
    ],
)
def test_lr_find_refuses_bad_arguments_first(kwargs, error, message):
    from trainer.tuner import Tuner

    L, _ = framework("lockstep")
    torch.manual_seed(0)
    model = _counting_module(L)(learning_rate=0.01)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(error) as raised:
        arguments = {"min_lr": 1e-4, "max_lr": 10.0, "num_training": 30, **kwargs}
        Tuner(_trainer("lockstep")).lr_find(model, **arguments)
    assert message in str(raised.value)
    # refused before anything ran: no training step, the module's rate and weights untouched
    assert model.steps == 0 and model.learning_rate == 0.01
    for a, b in zip(before, model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            {"num_training_steps": 0}, ValueError,
            "LearningRateFinder(num_training_steps) must be an int >= 1, got 0",
        ),
        ({"min_lr": 0.0}, ValueError, "LearningRateFinder(min_lr) must be a finite number > 0, got 0.0"),
        (
            {"max_lr": float("nan")}, ValueError,
            "LearningRateFinder(max_lr) must be a finite number > 0, got nan",
        ),
    ],
)
def test_learning_rate_finder_refuses_bad_arguments_at_construction(kwargs, error, message):
    _, cbs = framework("lockstep")
    with pytest.raises(error) as raised:
        cbs.LearningRateFinder(**kwargs)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"steps_per_trial": 0}, ValueError, "scale_batch_size(steps_per_trial) must be an int >= 1, got 0"),
        ({"init_val": 0}, ValueError, "scale_batch_size(init_val) must be an int >= 1, got 0"),
        ({"init_val": 2.0}, TypeError, "scale_batch_size(init_val) must be an int >= 1, got 2.0"),
        ({"max_trials": -1}, ValueError, "scale_batch_size(max_trials) must be an int >= 1, got -1"),
        ({"max_val": 0}, ValueError, "scale_batch_size(max_val) must be an int >= 1, got 0"),
        (
            {"init_val": 64, "max_val": 32}, ValueError,
            "scale_batch_size(init_val=64, max_val=32): init_val must not exceed max_val",
        ),
        (
            {"margin": float("nan")}, ValueError,
            "scale_batch_size(margin) must be a finite number in [0.0, 1.0), got nan",
        ),
        (
            {"batch_arg_name": ""}, ValueError,
            "scale_batch_size(batch_arg_name) must be a non-empty str, got ''",
        ),
        ({"mode": "double"}, ValueError, "scale_batch_size(mode='double'): use 'power' or 'binsearch'"),
    ],
)
def test_scale_batch_size_refuses_bad_arguments_first(kwargs, error, message):
    from trainer.tuner import Tuner

    L, _ = framework("lockstep")
    model = _counting_module(L)(batch_size=2)
    with pytest.raises(error) as raised:
        Tuner(_trainer("lockstep", max_epochs=1)).scale_batch_size(model, **kwargs)
    assert message in str(raised.value)
    assert model.steps == 0 and model.batch_size == 2
