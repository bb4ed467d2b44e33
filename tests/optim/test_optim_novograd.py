"""NovoGrad against the formulas of Ginsburg et al. 2019, computed here with plain tensor math."""
from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from trainer.optim import NovoGrad, named_param_groups

pytestmark = pytest.mark.timeout(60)

DT = torch.float64


def _reference_step(w, g, m, v, *, lr, betas, eps, wd, grad_averaging, excluded):
    """One NovoGrad step for one tensor; v is None before the layer's first step."""
    b1, b2 = betas
    norm_sq = (g * g).sum()
    v = norm_sq if v is None else b2 * v + (1 - b2) * norm_sq
    update = g / (v.sqrt() + eps)
    if not excluded:
        update = update + wd * w
    m = b1 * m + ((1 - b1) if grad_averaging else 1.0) * update
    return w - lr * m, m, v


def _params(*tensors):
    return [nn.Parameter(t.clone().to(DT)) for t in tensors]


def _grads(shapes, steps, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=gen, dtype=DT) for s in shapes] for _ in range(steps)]


@pytest.mark.parametrize(
    "grad_averaging, expected",
    [
        # ||g|| = 1, so v = 1 and m = g + 0.1 w = [0.9, 1.2]; w - 0.1 m
        (False, [[2.91, 3.88]]),
        # m = (1 - 0.95) * [0.9, 1.2] = [0.045, 0.06]
        (True, [[2.9955, 3.994]]),
    ],
)
def test_one_step_by_hand(grad_averaging, expected):
    (w,) = _params(torch.tensor([[3.0, 4.0]]))
    w.grad = torch.tensor([[0.6, 0.8]], dtype=DT)
    opt = NovoGrad([w], lr=0.1, weight_decay=0.1, eps=1e-12, grad_averaging=grad_averaging)
    opt.step()
    torch.testing.assert_close(w.detach(), torch.tensor(expected, dtype=DT))


def test_second_moment_starts_at_the_squared_norm():
    (w,) = _params(torch.tensor([[3.0, 4.0]]))
    opt = NovoGrad([w], lr=0.1)
    w.grad = torch.tensor([[0.6, 0.8]], dtype=DT)
    opt.step()
    torch.testing.assert_close(opt.state[w]["exp_avg_sq"], torch.tensor(1.0, dtype=DT))  # ||g||^2, not 0.02
    w.grad = torch.tensor([[0.0, 2.0]], dtype=DT)
    opt.step()
    torch.testing.assert_close(opt.state[w]["exp_avg_sq"], torch.tensor(0.98 * 1.0 + 0.02 * 4.0, dtype=DT))


@pytest.mark.parametrize("grad_averaging", [False, True])
@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_three_steps_match_reference(grad_averaging, wd):
    gen = torch.Generator().manual_seed(1)
    shapes = [(4, 3), (4,), (2, 3, 3, 3)]
    params = _params(*[torch.randn(s, generator=gen) for s in shapes])
    lr, betas, eps = 0.01, (0.9, 0.9), 1e-8
    opt = NovoGrad(params, lr=lr, betas=betas, eps=eps, weight_decay=wd, grad_averaging=grad_averaging)
    ws = [p.detach().clone() for p in params]
    ms = [torch.zeros_like(w) for w in ws]
    vs = [None] * len(ws)
    for step_grads in _grads(shapes, 3):
        for p, g in zip(params, step_grads):
            p.grad = g
        opt.step()
        for i, p in enumerate(params):
            ws[i], ms[i], vs[i] = _reference_step(
                ws[i], p.grad, ms[i], vs[i], lr=lr, betas=betas, eps=eps, wd=wd,
                grad_averaging=grad_averaging, excluded=(i == 1),
            )
            torch.testing.assert_close(p.detach(), ws[i])
            torch.testing.assert_close(opt.state[p]["exp_avg"], ms[i])
            torch.testing.assert_close(opt.state[p]["exp_avg_sq"], vs[i])


def test_first_step_is_per_parameter():
    # b has no gradient at step 1, so its first step (v = ||g||^2) comes at step 2.
    a, b = _params(torch.ones(2, 2), torch.ones(2, 3))
    opt = NovoGrad([a, b], lr=0.1, weight_decay=0.0)
    grads = _grads([(2, 2), (2, 3)], 2, seed=2)
    a.grad, b.grad = grads[0][0], None
    opt.step()
    a.grad, b.grad = grads[1]
    opt.step()
    torch.testing.assert_close(opt.state[b]["exp_avg_sq"], (grads[1][1] ** 2).sum())
    expected_va = 0.98 * (grads[0][0] ** 2).sum() + 0.02 * (grads[1][0] ** 2).sum()
    torch.testing.assert_close(opt.state[a]["exp_avg_sq"], expected_va)


def test_param_groups_use_their_own_hyperparameters():
    gen = torch.Generator().manual_seed(3)
    a, b = _params(torch.randn(3, 3, generator=gen), torch.randn(2, 4, generator=gen))
    opt = NovoGrad(
        [{"params": [a]}, {"params": [b], "lr": 0.05, "betas": (0.5, 0.7), "weight_decay": 0.2,
                           "grad_averaging": True}],
        lr=0.01,
    )
    wa, ma, va = a.detach().clone(), 0.0, None
    wb, mb, vb = b.detach().clone(), 0.0, None
    for ga, gb in _grads([(3, 3), (2, 4)], 3, seed=4):
        a.grad, b.grad = ga, gb
        opt.step()
        wa, ma, va = _reference_step(wa, ga, ma, va, lr=0.01, betas=(0.95, 0.98), eps=1e-8, wd=0.0,
                                     grad_averaging=False, excluded=False)
        wb, mb, vb = _reference_step(wb, gb, mb, vb, lr=0.05, betas=(0.5, 0.7), eps=1e-8, wd=0.2,
                                     grad_averaging=True, excluded=False)
    torch.testing.assert_close(a.detach(), wa)
    torch.testing.assert_close(b.detach(), wb)


def test_zero_grads_on_first_step_stay_finite():
    (w,) = _params(torch.tensor([[3.0, 4.0]]))
    w.grad = torch.zeros(1, 2, dtype=DT)
    opt = NovoGrad([w], lr=0.1, weight_decay=0.1)
    opt.step()
    # v = 0 and g / (0 + eps) = 0: only weight decay moves w.
    torch.testing.assert_close(w.detach(), torch.tensor([[2.97, 3.96]], dtype=DT))
    assert opt.state[w]["exp_avg_sq"].item() == 0.0


def test_zero_weights_take_a_normalized_step():
    (w,) = _params(torch.zeros(1, 2))
    w.grad = torch.tensor([[3.0, -4.0]], dtype=DT)
    NovoGrad([w], lr=0.5, weight_decay=0.1, eps=1e-12).step()
    # g / ||g|| = [0.6, -0.8]
    torch.testing.assert_close(w.detach(), torch.tensor([[-0.3, 0.4]], dtype=DT))


def test_zero_weights_and_grads_stay_finite():
    (w,) = _params(torch.zeros(2, 2))
    w.grad = torch.zeros(2, 2, dtype=DT)
    opt = NovoGrad([w], lr=0.1, weight_decay=0.1)
    opt.step()
    opt.step()
    assert torch.equal(w.detach(), torch.zeros(2, 2, dtype=DT))


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 2)).to(DT)


def _check_updates(model, opt, excluded_names, *, lr, wd):
    gen = torch.Generator().manual_seed(7)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen, dtype=DT)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    for name, p in model.named_parameters():
        expected, _, _ = _reference_step(before[name], p.grad, 0.0, None, lr=lr, betas=(0.95, 0.98), eps=1e-8,
                                         wd=wd, grad_averaging=False, excluded=name in excluded_names)
        torch.testing.assert_close(p.detach(), expected, msg=name)


def test_default_excludes_1d_tensors_from_weight_decay():
    model = _model()
    opt = NovoGrad(model.parameters(), lr=0.01, weight_decay=0.5)
    assert opt.param_groups[0]["excluded"] == [False, True, True, True, False, True]
    _check_updates(model, opt, {"0.bias", "1.weight", "1.bias", "2.bias"}, lr=0.01, wd=0.5)


def test_callable_and_name_list_exclusion():
    model = _model()
    opt = NovoGrad(
        model.named_parameters(), lr=0.01, weight_decay=0.5, exclude=lambda n, p: n.startswith("0.")
    )
    _check_updates(model, opt, {"0.weight", "0.bias"}, lr=0.01, wd=0.5)

    model = _model()
    opt = NovoGrad(named_param_groups(model, exclude=["bias"]), lr=0.01, weight_decay=0.5)
    _check_updates(model, opt, {"0.bias", "1.bias", "2.bias"}, lr=0.01, wd=0.5)

    model = _model()
    opt = NovoGrad(model.parameters(), lr=0.01, weight_decay=0.5, exclude=None)
    _check_updates(model, opt, set(), lr=0.01, wd=0.5)


def test_skips_params_without_grad_and_runs_closure():
    model = _model()
    frozen = nn.Parameter(torch.ones(3, 3, dtype=DT))
    x = torch.randn(8, 3, dtype=DT)
    opt = NovoGrad(list(model.parameters()) + [frozen], lr=0.01)

    def closure():
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss.ndim == 0
    assert frozen not in opt.state and torch.equal(frozen.detach(), torch.ones(3, 3, dtype=DT))


def _train(model, opt, steps, seed):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 3, generator=gen, dtype=DT)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


def test_state_dict_round_trip():
    model = _model()
    opt = NovoGrad(model.parameters(), lr=0.01, weight_decay=0.01, grad_averaging=True)
    _train(model, opt, 3, seed=8)
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buffer)
    _train(model, opt, 3, seed=9)

    buffer.seek(0)
    saved = torch.load(buffer)
    resumed = _model()
    resumed.load_state_dict(saved["model"])
    opt2 = NovoGrad(resumed.parameters(), lr=0.01, weight_decay=0.01, grad_averaging=True)
    opt2.load_state_dict(saved["opt"])
    _train(resumed, opt2, 3, seed=9)
    for p, q in zip(model.parameters(), resumed.parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(lr=-0.01), ValueError, r"lr must be a finite number >= 0, got -0.01"),
        (dict(lr=0.01, betas=(0.95, 1.0)), ValueError, r"betas\[1\] must be a finite number in \[0, 1\), got 1.0"),
        (dict(lr=0.01, betas=(-0.5, 0.98)), ValueError, r"betas\[0\] must be a finite number in \[0, 1\)"),
        (dict(lr=0.01, eps=-1.0), ValueError, r"eps must be a finite number > 0"),
        (dict(lr=0.01, weight_decay=-1.0), ValueError, r"weight_decay must be a finite number >= 0"),
        (dict(lr=0.01, grad_averaging=1), TypeError, r"grad_averaging must be a bool \(True or False\), got 1"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        NovoGrad([nn.Parameter(torch.zeros(2, 2))], **kwargs)
