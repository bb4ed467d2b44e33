"""LARS / LARC against the formulas of You et al. 2017, computed here with plain tensor math."""
from __future__ import annotations

import copy
import io
import math

import pytest
import torch
from torch import nn

from trainer.optim import LARS, named_param_groups

pytestmark = pytest.mark.timeout(60)

DT = torch.float64


def _reference_step(w, g, buf, *, lr, momentum, wd, eta, eps, clip, excluded):
    """One LARS/LARC step for one tensor, written straight from the docstring's formulas."""
    if excluded:
        rate, d = lr, g
    else:
        w_norm, g_norm = w.norm().item(), g.norm().item()
        if w_norm > 0 and g_norm > 0:
            local = eta * w_norm / (g_norm + wd * w_norm + eps)
            rate = min(local, lr) if clip else lr * local
        else:
            rate = lr
        d = g + wd * w
    buf = momentum * buf + rate * d
    return w - buf, buf


def _params(*tensors):
    return [nn.Parameter(t.clone().to(DT)) for t in tensors]


def test_one_step_by_hand():
    # ||w|| = 5, ||g|| = 1: local = 0.01 * 5 / (1 + 0.1 * 5) = 1/30; rate = lr * local = 1/15.
    (w,) = _params(torch.tensor([[3.0, 4.0]]))
    w.grad = torch.tensor([[0.6, 0.8]], dtype=DT)
    opt = LARS([w], lr=2.0, momentum=0.9, weight_decay=0.1, trust_coefficient=0.01, eps=0.0)
    opt.step()
    # d = g + 0.1 w = [0.9, 1.2]; v = d / 15 = [0.06, 0.08]
    torch.testing.assert_close(w.detach(), torch.tensor([[2.94, 3.92]], dtype=DT))
    torch.testing.assert_close(opt.state[w]["momentum_buffer"], torch.tensor([[0.06, 0.08]], dtype=DT))


@pytest.mark.parametrize(
    "lr, expected",
    [
        (0.02, [[3 - 0.02 * 0.9, 4 - 0.02 * 1.2]]),  # local 1/30 > lr: the rate is clipped to lr
        (0.05, [[3 - 0.9 / 30, 4 - 1.2 / 30]]),  # local 1/30 < lr: the local rate itself
    ],
)
def test_larc_one_step_by_hand(lr, expected):
    (w,) = _params(torch.tensor([[3.0, 4.0]]))
    w.grad = torch.tensor([[0.6, 0.8]], dtype=DT)
    opt = LARS([w], lr=lr, weight_decay=0.1, trust_coefficient=0.01, eps=0.0, clip=True)
    opt.step()
    torch.testing.assert_close(w.detach(), torch.tensor(expected, dtype=DT))


def _grads(shapes, steps, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=gen, dtype=DT) for s in shapes] for _ in range(steps)]


@pytest.mark.parametrize("clip", [False, True])
@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_three_steps_match_reference(clip, wd):
    gen = torch.Generator().manual_seed(1)
    shapes = [(4, 3), (4,), (2, 3, 3, 3), (5, 2)]
    params = _params(*[torch.randn(s, generator=gen) for s in shapes])
    # Large gradients on the first weight, tiny ones on the last: with clip=True one layer is
    # capped by lr and the other keeps its local rate, so both branches of min() are covered.
    grad_scale = [10.0, 1.0, 1.0, 0.01]
    lr, momentum, eta, eps = 0.05, 0.9, 0.02, 1e-8
    opt = LARS(params, lr=lr, momentum=momentum, weight_decay=wd, trust_coefficient=eta, eps=eps, clip=clip)
    assert opt.param_groups[0]["excluded"] == [False, True, False, False]

    ws = [p.detach().clone() for p in params]
    bufs = [torch.zeros_like(w) for w in ws]
    for step_grads in _grads(shapes, 3):
        for p, g, s in zip(params, step_grads, grad_scale):
            p.grad = g * s
        opt.step()
        for i, p in enumerate(params):
            ws[i], bufs[i] = _reference_step(
                ws[i], p.grad, bufs[i], lr=lr, momentum=momentum, wd=wd, eta=eta, eps=eps, clip=clip,
                excluded=(i == 1),
            )
            torch.testing.assert_close(p.detach(), ws[i])
            torch.testing.assert_close(opt.state[p]["momentum_buffer"], bufs[i])
    if clip:
        local = [eta * w.norm() / (p.grad.norm() + wd * w.norm()) for w, p in zip(ws, params)]
        assert local[0] < lr < local[3]


def test_param_groups_use_their_own_hyperparameters():
    gen = torch.Generator().manual_seed(2)
    a, b = _params(torch.randn(3, 3, generator=gen), torch.randn(2, 4, generator=gen))
    opt = LARS(
        [
            {"params": [a]},
            {"params": [b], "lr": 0.5, "weight_decay": 0.1, "clip": True, "trust_coefficient": 0.1},
        ],
        lr=2.0,
        momentum=0.5,
    )
    wa, wb = a.detach().clone(), b.detach().clone()
    ba, bb = torch.zeros_like(wa), torch.zeros_like(wb)
    for step_grads in _grads([(3, 3), (2, 4)], 3, seed=3):
        a.grad, b.grad = step_grads
        opt.step()
        wa, ba = _reference_step(wa, a.grad, ba, lr=2.0, momentum=0.5, wd=0.0, eta=0.001, eps=1e-8,
                                 clip=False, excluded=False)
        wb, bb = _reference_step(wb, b.grad, bb, lr=0.5, momentum=0.5, wd=0.1, eta=0.1, eps=1e-8,
                                 clip=True, excluded=False)
    torch.testing.assert_close(a.detach(), wa)
    torch.testing.assert_close(b.detach(), wb)


@pytest.mark.parametrize("clip", [False, True])
def test_zero_weights_take_a_plain_step(clip):
    (w,) = _params(torch.zeros(1, 2))
    w.grad = torch.tensor([[1.0, 2.0]], dtype=DT)
    LARS([w], lr=0.5, weight_decay=0.1, clip=clip).step()
    # ||w|| = 0: ratio 1, so v = lr * (g + wd * 0)
    torch.testing.assert_close(w.detach(), torch.tensor([[-0.5, -1.0]], dtype=DT))


@pytest.mark.parametrize("clip", [False, True])
def test_zero_grads_still_decay(clip):
    (w,) = _params(torch.tensor([[3.0, 4.0]]))
    w.grad = torch.zeros(1, 2, dtype=DT)
    LARS([w], lr=0.5, weight_decay=0.1, clip=clip).step()
    # ||g|| = 0: ratio 1, v = 0.5 * 0.1 * w
    torch.testing.assert_close(w.detach(), torch.tensor([[2.85, 3.8]], dtype=DT))


def test_zero_weights_and_grads_stay_finite():
    (w,) = _params(torch.zeros(2, 2))
    w.grad = torch.zeros(2, 2, dtype=DT)
    opt = LARS([w], lr=1.0, weight_decay=0.1, eps=0.0)
    opt.step()
    opt.step()
    assert torch.equal(w.detach(), torch.zeros(2, 2, dtype=DT))


def test_excluded_params_match_torch_sgd():
    # Excluded = plain momentum SGD; with a constant lr that is torch.optim.SGD exactly.
    gen = torch.Generator().manual_seed(4)
    ours = _params(torch.randn(3, 2, generator=gen), torch.randn(3, generator=gen))
    theirs = [nn.Parameter(p.detach().clone()) for p in ours]
    opt = LARS([{"params": ours, "excluded": True}], lr=0.3, momentum=0.9, weight_decay=0.5)
    ref = torch.optim.SGD(theirs, lr=0.3, momentum=0.9)
    for step_grads in _grads([(3, 2), (3,)], 3, seed=5):
        for p, q, g in zip(ours, theirs, step_grads):
            p.grad, q.grad = g.clone(), g.clone()
        opt.step()
        ref.step()
    for p, q in zip(ours, theirs):
        torch.testing.assert_close(p, q)


def _linear_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 2)).to(DT)


def _set_grads(model, seed=6):
    gen = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen, dtype=DT)


def _check_updates(model, opt, excluded_names, *, lr, wd):
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    for name, p in model.named_parameters():
        expected, _ = _reference_step(
            before[name], p.grad, torch.zeros_like(p), lr=lr, momentum=0.9, wd=wd, eta=0.001, eps=1e-8,
            clip=False, excluded=name in excluded_names,
        )
        torch.testing.assert_close(p.detach(), expected, msg=name)


def test_default_excludes_1d_tensors():
    model = _linear_model()
    _set_grads(model)
    opt = LARS(model.parameters(), lr=2.0, weight_decay=0.1)
    assert opt.param_groups[0]["excluded"] == [False, True, True, True, False, True]
    _check_updates(model, opt, {"0.bias", "1.weight", "1.bias", "2.bias"}, lr=2.0, wd=0.1)


def test_callable_exclusion_replaces_the_default():
    model = _linear_model()
    _set_grads(model)
    opt = LARS(
        model.named_parameters(), lr=2.0, weight_decay=0.1, exclude=lambda name, p: name.startswith("2.")
    )
    assert opt.param_groups[0]["param_names"] == [n for n, _ in model.named_parameters()]
    _check_updates(model, opt, {"2.weight", "2.bias"}, lr=2.0, wd=0.1)


def test_name_list_exclusion():
    model = _linear_model()
    _set_grads(model)
    opt = LARS(model.named_parameters(), lr=2.0, weight_decay=0.1, exclude=["bias", "1."])
    _check_updates(model, opt, {"0.bias", "1.weight", "1.bias", "2.bias"}, lr=2.0, wd=0.1)


def test_named_param_groups_and_exclude_none():
    model = _linear_model()
    _set_grads(model)
    opt = LARS(named_param_groups(model, exclude=["0."]), lr=2.0, weight_decay=0.1)
    assert [g["excluded"] for g in opt.param_groups] == [[False] * 4, [True] * 2]
    _check_updates(model, opt, {"0.weight", "0.bias"}, lr=2.0, wd=0.1)

    model = _linear_model()
    _set_grads(model)
    opt = LARS(model.parameters(), lr=2.0, weight_decay=0.1, exclude=None)
    _check_updates(model, opt, set(), lr=2.0, wd=0.1)


def test_name_exclusion_without_names_is_an_error():
    model = _linear_model()
    with pytest.raises(ValueError, match="given without names; pass model.named_parameters()"):
        LARS(model.parameters(), lr=0.1, exclude=["bias"])
    with pytest.raises(ValueError, match="given without names"):
        LARS(model.parameters(), lr=0.1, exclude=lambda n, p: "bias" in n)


def test_skips_params_without_grad_and_leaves_grads_untouched():
    gen = torch.Generator().manual_seed(7)
    a, b = _params(torch.randn(3, 3, generator=gen), torch.randn(2, 2, generator=gen))
    a.grad = torch.randn(3, 3, generator=gen, dtype=DT)
    grad_before = a.grad.clone()
    b_before = b.detach().clone()
    opt = LARS([a, b], lr=1.0, weight_decay=0.1)
    opt.step()
    assert torch.equal(b.detach(), b_before)
    assert b not in opt.state
    assert torch.equal(a.grad, grad_before)


def test_closure_is_evaluated_with_grad_enabled():
    model = _linear_model()
    x = torch.randn(8, 3, dtype=DT)
    opt = LARS(model.parameters(), lr=1.0)

    def closure():
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss

    with torch.no_grad():
        loss = opt.step(closure)
    assert math.isfinite(float(loss.detach()))
    assert all("momentum_buffer" in opt.state[p] for p in model.parameters())


def _train(model, opt, steps, seed):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 3, generator=gen, dtype=DT)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


@pytest.mark.parametrize("clip", [False, True])
def test_state_dict_round_trip(clip):
    model = _linear_model()
    opt = LARS(model.named_parameters(), lr=0.5, weight_decay=0.01, clip=clip, exclude=["bias"])
    _train(model, opt, 3, seed=8)
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buffer)
    _train(model, opt, 3, seed=9)

    buffer.seek(0)
    saved = torch.load(buffer)
    resumed = _linear_model()
    resumed.load_state_dict(saved["model"])
    opt2 = LARS(resumed.named_parameters(), lr=0.5, weight_decay=0.01, clip=clip, exclude=["bias"])
    opt2.load_state_dict(saved["opt"])
    _train(resumed, opt2, 3, seed=9)
    for p, q in zip(model.parameters(), resumed.parameters()):
        assert torch.equal(p, q)


def test_deepcopy_keeps_the_exclusion_rule():
    model = _linear_model()
    opt = copy.deepcopy(LARS(model.named_parameters(), lr=0.1, exclude=["bias"]))
    extra = nn.Parameter(torch.zeros(3, dtype=DT))
    opt.add_param_group({"params": [("extra.bias", extra)]})
    assert opt.param_groups[-1]["excluded"] == [True]


def test_sparse_gradients_are_rejected():
    emb = nn.Embedding(5, 2, sparse=True)
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match="LARS does not support sparse gradients"):
        LARS(emb.parameters(), lr=0.1).step()


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(lr=-0.1), ValueError, r"lr must be a finite number >= 0, got -0.1"),
        (dict(lr=float("nan")), ValueError, r"lr must be a finite number >= 0, got nan"),
        (dict(lr="0.1"), TypeError, r"lr must be a finite number >= 0, got '0.1'"),
        (dict(lr=0.1, momentum=1.0), ValueError, r"momentum must be a finite number in \[0, 1\), got 1.0"),
        (dict(lr=0.1, momentum=-0.5), ValueError, r"momentum must be a finite number in \[0, 1\)"),
        (dict(lr=0.1, weight_decay=-1e-4), ValueError, r"weight_decay must be a finite number >= 0"),
        (dict(lr=0.1, trust_coefficient=0.0), ValueError, r"trust_coefficient must be a finite number > 0, got 0.0"),
        (dict(lr=0.1, trust_coefficient=-0.001), ValueError, r"trust_coefficient must be a finite number > 0"),
        (dict(lr=0.1, eps=-1e-8), ValueError, r"eps must be a finite number >= 0"),
        (dict(lr=0.1, clip="yes"), TypeError, r"clip must be a bool \(True or False\), got 'yes'"),
        (dict(lr=0.1, exclude=3), TypeError, r"exclude must be None, a callable"),
        (dict(lr=0.1, exclude=["bias", ""]), ValueError, r"exclude name substrings must be non-empty"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        LARS([nn.Parameter(torch.zeros(2, 2))], **kwargs)


def test_bad_group_hyperparameters():
    p, q = nn.Parameter(torch.zeros(2, 2)), nn.Parameter(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="trust_coefficient must be a finite number > 0"):
        LARS([{"params": [p]}, {"params": [q], "trust_coefficient": 0.0}], lr=0.1)
    with pytest.raises(ValueError, match=r"group\['excluded'\] must be a bool or a list of bools"):
        LARS([{"params": [p, q], "excluded": [True]}], lr=0.1)
