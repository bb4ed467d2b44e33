"""Linear warmup (Goyal et al. 2017) and linear scaling of scheduler learning rates."""
from __future__ import annotations

import io
import math
import warnings

import pytest
import torch
from torch import nn
from torch.optim.lr_scheduler import (
    ChainedScheduler,
    ConstantLR,
    CosineAnnealingLR,
    CosineAnnealingWarmRestarts,
    CyclicLR,
    ExponentialLR,
    LambdaLR,
    LinearLR,
    LRScheduler,
    MultiStepLR,
    OneCycleLR,
    PolynomialLR,
    ReduceLROnPlateau,
    SequentialLR,
    StepLR,
)

from trainer.optim import LARS, LinearWarmup, scale_scheduler_base_lrs, warmup

pytestmark = pytest.mark.timeout(60)

BASES = (0.4, 0.04)  # two param groups with different rates
W, SF, T = 8, 0.1, 10  # warmup steps, start factor, cosine length


def _optimizer(bases=BASES, cls=torch.optim.SGD):
    groups = [{"params": [nn.Parameter(torch.zeros(2, 2))], "lr": b} for b in bases]
    return cls(groups, lr=bases[0], momentum=0.9)


def _lrs(sched, steps):
    """LR of every group at steps 0..steps (after 0..steps scheduler steps)."""
    opt = sched.optimizer
    out = [[g["lr"] for g in opt.param_groups]]
    for _ in range(steps):
        opt.step()  # params have no grad: a no-op that keeps torch's call-order check quiet
        if isinstance(sched, ReduceLROnPlateau):
            sched.step(1.0)  # a metric that never improves: the rate drops every patience+1 steps
        else:
            sched.step()
        out.append([g["lr"] for g in opt.param_groups])
    return out


def _warm(t, base):
    return base * (SF + (1 - SF) * t / W)


def _cosine(k, base):
    return base * 0.5 * (1 + math.cos(math.pi * k / T))


def test_warmup_then_cosine_at_key_steps():
    opt = _optimizer()
    sched = warmup(CosineAnnealingLR(opt, T_max=T), W, SF)
    lrs = _lrs(sched, W + T)
    for i, base in enumerate(BASES):
        assert lrs[0][i] == pytest.approx(base * SF)
        assert lrs[W // 2][i] == pytest.approx(base * (SF + 1) / 2)
        assert lrs[W][i] == pytest.approx(base)
        assert lrs[W + 1][i] == pytest.approx(_cosine(1, base))
        assert lrs[W + T // 2][i] == pytest.approx(base / 2)
        assert lrs[W + T][i] == pytest.approx(0.0, abs=1e-12)
        for t in range(W):
            assert lrs[t][i] == pytest.approx(_warm(t, base))
        for k in range(T + 1):
            assert lrs[W + k][i] == pytest.approx(_cosine(k, base))
    assert sched.get_last_lr() == pytest.approx(lrs[-1])


def test_warmup_then_step_and_poly_decay():
    opt = _optimizer()
    lrs = _lrs(warmup(StepLR(opt, step_size=3, gamma=0.5), W, SF), W + 9)
    for k in range(10):
        assert lrs[W + k][0] == pytest.approx(BASES[0] * 0.5 ** (k // 3))

    opt = _optimizer()
    poly = LambdaLR(opt, lambda k: (1 - min(k, 20) / 20) ** 2)
    lrs = _lrs(warmup(poly, W, SF), W + 20)
    assert lrs[W // 2][1] == pytest.approx(_warm(W // 2, BASES[1]))
    for k in range(21):
        assert lrs[W + k][1] == pytest.approx(BASES[1] * (1 - k / 20) ** 2)


def test_warmup_without_scheduler_is_constant_afterwards():
    opt = _optimizer()
    lrs = _lrs(warmup(None, W, SF, optimizer=opt), W + 5)
    assert [row[0] for row in lrs] == pytest.approx([_warm(t, BASES[0]) for t in range(W)] + [BASES[0]] * 6)


def test_zero_warmup_steps_and_start_factor_one():
    opt = _optimizer()
    lrs = _lrs(warmup(CosineAnnealingLR(opt, T_max=T), 0, SF), 3)
    assert [row[0] for row in lrs] == pytest.approx([_cosine(k, BASES[0]) for k in range(4)])

    opt = _optimizer()
    lrs = _lrs(warmup(None, W, 1.0, optimizer=opt), W + 2)
    assert [row[0] for row in lrs] == pytest.approx([BASES[0]] * (W + 3))


def test_warmup_respects_initial_lr_already_on_the_optimizer():
    opt = _optimizer()
    for group, base in zip(opt.param_groups, BASES):
        group["initial_lr"] = 2 * base  # e.g. set by a trainer, or by an earlier scheduler
    sched = warmup(None, W, SF, optimizer=opt)
    assert sched.base_lrs == pytest.approx([2 * b for b in BASES])
    lrs = _lrs(sched, W + 1)
    assert lrs[0] == pytest.approx([2 * b * SF for b in BASES])
    assert lrs[W // 2] == pytest.approx([2 * b * (SF + 1) / 2 for b in BASES])
    assert lrs[W] == pytest.approx([2 * b for b in BASES])
    assert lrs[W + 1] == pytest.approx([2 * b for b in BASES])


def _scale_like_the_trainer(sched, factor):
    """What the trainer does after configure_optimizers for the linear scaling rule."""
    for group in sched.optimizer.param_groups:
        group["lr"] *= factor
        if "initial_lr" in group:  # ReduceLROnPlateau never sets it
            group["initial_lr"] *= factor
    scale_scheduler_base_lrs(sched, factor)


def test_scaled_warmup_ends_at_the_scaled_lr():
    opt = LARS([{"params": [nn.Parameter(torch.zeros(2, 2))], "lr": b} for b in BASES], lr=BASES[0])
    sched = warmup(CosineAnnealingLR(opt, T_max=T), W, SF)
    _scale_like_the_trainer(sched, 2)
    assert sched.get_last_lr() == pytest.approx([2 * b * SF for b in BASES])
    lrs = _lrs(sched, W + T)
    for i, base in enumerate(BASES):
        assert lrs[0][i] == pytest.approx(2 * base * SF)
        assert lrs[W // 2][i] == pytest.approx(2 * base * (SF + 1) / 2)
        assert lrs[W][i] == pytest.approx(2 * base)
        for k in (1, 3, T // 2, T):
            assert lrs[W + k][i] == pytest.approx(_cosine(k, 2 * base), abs=1e-12)


def _build(kind, opt):
    if kind == "warmup+cosine":
        return warmup(CosineAnnealingLR(opt, T_max=T), W, SF)
    if kind == "warmup+cosine-floor":
        return warmup(CosineAnnealingLR(opt, T_max=T, eta_min=0.01), W, SF)
    if kind == "warmup+none":
        return warmup(None, W, SF, optimizer=opt)
    if kind == "warmup+sequential":
        inner = SequentialLR(opt, [ConstantLR(opt, factor=0.5, total_iters=4), ExponentialLR(opt, 0.9)], [4])
        return warmup(inner, W, SF)
    if kind == "sequential":
        parts = [LinearLR(opt, start_factor=SF, total_iters=W), CosineAnnealingLR(opt, T_max=T)]
        return SequentialLR(opt, parts, [W])
    if kind == "chained":
        return ChainedScheduler([ConstantLR(opt, factor=0.5, total_iters=3), ExponentialLR(opt, gamma=0.9)])
    if kind == "step":
        return StepLR(opt, step_size=4, gamma=0.5)
    if kind == "multistep":
        return MultiStepLR(opt, milestones=[3, 7], gamma=0.1)
    if kind == "lambda":
        return LambdaLR(opt, lambda k: 1 / (1 + k))
    if kind == "poly":
        return PolynomialLR(opt, total_iters=12, power=2.0)
    if kind == "restarts":
        return CosineAnnealingWarmRestarts(opt, T_0=5, eta_min=0.002)
    if kind == "plateau":
        return ReduceLROnPlateau(opt, factor=0.5, patience=2, min_lr=[0.05, 0.001])
    if kind == "cyclic":
        return CyclicLR(opt, base_lr=[b / 10 for b in BASES], max_lr=list(BASES), step_size_up=4)
    if kind == "onecycle":
        return OneCycleLR(opt, max_lr=list(BASES), total_steps=30)
    raise AssertionError(kind)


KINDS = [
    "warmup+cosine", "warmup+cosine-floor", "warmup+none", "warmup+sequential", "sequential", "chained",
    "step", "multistep", "lambda", "poly", "restarts", "plateau", "cyclic", "onecycle",
]


@pytest.mark.parametrize("kind", KINDS)
def test_scaling_multiplies_the_whole_schedule(kind):
    plain = _lrs(_build(kind, _optimizer()), 25)
    sched = _build(kind, _optimizer())
    _scale_like_the_trainer(sched, 2)
    scaled = _lrs(sched, 25)
    for t, (row, scaled_row) in enumerate(zip(plain, scaled)):
        assert scaled_row == pytest.approx([2 * lr for lr in row], abs=1e-12), t
    assert sched.get_last_lr() == pytest.approx(scaled[-1])


def test_scaling_twice_composes_and_never_touches_param_groups():
    opt = _optimizer()
    sched = warmup(CosineAnnealingLR(opt, T_max=T), W, SF)
    scale_scheduler_base_lrs(sched, 2)
    scale_scheduler_base_lrs(sched, 1.5)
    assert sched.base_lrs == pytest.approx([3 * b for b in BASES])
    assert sched.after.base_lrs == pytest.approx([3 * b for b in BASES])
    assert [g["initial_lr"] for g in opt.param_groups] == pytest.approx(list(BASES))
    with pytest.raises(ValueError, match="factor must be a finite number > 0, got 0.0"):
        scale_scheduler_base_lrs(sched, 0.0)


@pytest.mark.parametrize("stop_at", [W // 2, W, W + 3])
def test_state_dict_round_trip(stop_at):
    opt = _optimizer()
    sched = warmup(CosineAnnealingLR(opt, T_max=T), W, SF)
    _lrs(sched, stop_at)
    buffer = io.BytesIO()
    torch.save({"opt": opt.state_dict(), "sched": sched.state_dict()}, buffer)
    rest = _lrs(sched, W + T - stop_at)

    buffer.seek(0)
    saved = torch.load(buffer)
    opt2 = _optimizer()
    sched2 = warmup(CosineAnnealingLR(opt2, T_max=T), W, SF)
    opt2.load_state_dict(saved["opt"])
    sched2.load_state_dict(saved["sched"])
    assert sched2.last_epoch == stop_at and sched2.after.last_epoch == max(0, stop_at - W)
    assert _lrs(sched2, W + T - stop_at) == rest


def test_lightning_style_entry_and_no_torch_warnings():
    opt = _optimizer()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched = warmup(CosineAnnealingLR(opt, T_max=T), W, SF)
        entry = {"scheduler": sched, "interval": "step"}
        assert isinstance(entry["scheduler"], LRScheduler)
        _lrs(sched, W + 3)
        assert isinstance(sched.get_last_lr(), list)
        assert sched.get_lr() == pytest.approx(sched.get_last_lr())


def test_linear_warmup_class_matches_the_function():
    opt = _optimizer()
    sched = LinearWarmup(opt, W, SF)
    expected = [_warm(t, BASES[0]) for t in range(W)] + [BASES[0]]
    assert [row[0] for row in _lrs(sched, W)] == pytest.approx(expected)


@pytest.mark.parametrize(
    "steps, factor, error, message",
    [
        (-1, SF, ValueError, r"warmup_steps must be an int >= 0, got -1"),
        (2.5, SF, TypeError, r"warmup_steps must be an int >= 0, got 2.5"),
        (W, 0.0, ValueError, r"start_factor must be a finite number in \(0, 1\], got 0.0"),
        (W, 1.5, ValueError, r"start_factor must be a finite number in \(0, 1\], got 1.5"),
        (W, -0.1, ValueError, r"start_factor must be a finite number in \(0, 1\], got -0.1"),
    ],
)
def test_bad_arguments(steps, factor, error, message):
    with pytest.raises(error, match=message):
        warmup(None, steps, factor, optimizer=_optimizer())


def test_bad_wrapped_schedulers():
    opt = _optimizer()
    with pytest.raises(ValueError, match=r"warmup\(None, \.\.\.\) needs the optimizer"):
        warmup(None, W, SF)
    with pytest.raises(TypeError, match="cannot hand over to ReduceLROnPlateau"):
        warmup(ReduceLROnPlateau(opt), W, SF)
    stepped = StepLR(opt, step_size=2)
    opt.step()
    stepped.step()
    with pytest.raises(ValueError, match=r"already been stepped \(last_epoch=1\)"):
        warmup(stepped, W, SF)
    with pytest.raises(ValueError, match="not the optimizer of the given scheduler"):
        warmup(StepLR(_optimizer(), step_size=2), W, SF, optimizer=opt)
    sched = warmup(None, W, SF, optimizer=opt)
    with pytest.raises(TypeError, match="takes no epoch argument"):
        sched.step(3)
