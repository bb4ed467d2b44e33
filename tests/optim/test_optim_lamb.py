"""LAMB against the formulas of You et al. 2019, computed here with plain tensor math."""
from __future__ import annotations

import io
import math

import pytest
import torch
from torch import nn

from trainer.optim import LAMB, named_param_groups

pytestmark = pytest.mark.timeout(60)

DT = torch.float64


def _reference_step(w, g, m, v, t, *, lr, betas, eps, wd, excluded):
    """One LAMB step (1-based step t) for one tensor, written straight from the docstring."""
    b1, b2 = betas
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    r = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps)
    if excluded:
        return w - lr * r, m, v
    u = r + wd * w
    w_norm, u_norm = w.norm().item(), u.norm().item()
    ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
    return w - lr * ratio * u, m, v


def _params(*tensors):
    return [nn.Parameter(t.clone().to(DT)) for t in tensors]


def _grads(shapes, steps, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=gen, dtype=DT) for s in shapes] for _ in range(steps)]


def test_one_step_by_hand():
    (w,) = _params(torch.tensor([[3.0, 4.0]]))
    w.grad = torch.tensor([[0.6, -0.8]], dtype=DT)
    LAMB([w], lr=0.01, weight_decay=0.1, eps=1e-12).step()
    # Step 1: m_hat = g, v_hat = g^2, so r = sign(g) = [1, -1]; u = r + 0.1 w = [1.3, -0.6];
    # ratio = ||w|| / ||u|| = 5 / sqrt(1.3^2 + 0.6^2).
    ratio = 5 / math.sqrt(1.3**2 + 0.6**2)
    expected = torch.tensor([[3 - 0.01 * ratio * 1.3, 4 + 0.01 * ratio * 0.6]], dtype=DT)
    torch.testing.assert_close(w.detach(), expected)


@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_three_steps_match_reference(wd):
    gen = torch.Generator().manual_seed(1)
    shapes = [(4, 3), (4,), (2, 3, 3, 3)]
    params = _params(*[torch.randn(s, generator=gen) for s in shapes])
    lr, betas, eps = 0.02, (0.9, 0.99), 1e-6
    opt = LAMB(params, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    ws = [p.detach().clone() for p in params]
    ms = [torch.zeros_like(w) for w in ws]
    vs = [torch.zeros_like(w) for w in ws]
    for t, step_grads in enumerate(_grads(shapes, 3), start=1):
        for p, g in zip(params, step_grads):
            p.grad = g
        opt.step()
        for i, p in enumerate(params):
            ws[i], ms[i], vs[i] = _reference_step(
                ws[i], p.grad, ms[i], vs[i], t, lr=lr, betas=betas, eps=eps, wd=wd, excluded=(i == 1)
            )
            torch.testing.assert_close(p.detach(), ws[i])
            torch.testing.assert_close(opt.state[p]["exp_avg"], ms[i])
            torch.testing.assert_close(opt.state[p]["exp_avg_sq"], vs[i])
            assert opt.state[p]["step"] == t


def test_step_counts_are_per_parameter():
    # A parameter that missed a step (grad None) keeps its own bias correction.
    a, b = _params(torch.ones(2, 2), torch.full((2, 2), 2.0))
    opt = LAMB([a, b], lr=0.01, weight_decay=0.0)
    wa, ma, va = a.detach().clone(), torch.zeros(2, 2, dtype=DT), torch.zeros(2, 2, dtype=DT)
    wb, mb, vb = b.detach().clone(), torch.zeros(2, 2, dtype=DT), torch.zeros(2, 2, dtype=DT)
    grads = _grads([(2, 2)], 3, seed=2)
    a.grad, b.grad = grads[0][0], None
    opt.step()
    wa, ma, va = _reference_step(wa, a.grad, ma, va, 1, lr=0.01, betas=(0.9, 0.999), eps=1e-6, wd=0.0,
                                 excluded=False)
    a.grad, b.grad = grads[1][0], grads[2][0]
    opt.step()
    wa, ma, va = _reference_step(wa, a.grad, ma, va, 2, lr=0.01, betas=(0.9, 0.999), eps=1e-6, wd=0.0,
                                 excluded=False)
    wb, mb, vb = _reference_step(wb, b.grad, mb, vb, 1, lr=0.01, betas=(0.9, 0.999), eps=1e-6, wd=0.0,
                                 excluded=False)
    assert (opt.state[a]["step"], opt.state[b]["step"]) == (2, 1)
    torch.testing.assert_close(a.detach(), wa)
    torch.testing.assert_close(b.detach(), wb)


def test_param_groups_use_their_own_hyperparameters():
    gen = torch.Generator().manual_seed(3)
    a, b = _params(torch.randn(3, 3, generator=gen), torch.randn(2, 4, generator=gen))
    groups = [{"params": [a]}, {"params": [b], "lr": 0.05, "betas": (0.5, 0.9), "weight_decay": 0.3}]
    opt = LAMB(groups, lr=0.01)
    wa, ma, va = a.detach().clone(), 0.0, 0.0
    wb, mb, vb = b.detach().clone(), 0.0, 0.0
    for t, (ga, gb) in enumerate(_grads([(3, 3), (2, 4)], 3, seed=4), start=1):
        a.grad, b.grad = ga, gb
        opt.step()
        wa, ma, va = _reference_step(wa, ga, ma, va, t, lr=0.01, betas=(0.9, 0.999), eps=1e-6, wd=0.01,
                                     excluded=False)
        wb, mb, vb = _reference_step(wb, gb, mb, vb, t, lr=0.05, betas=(0.5, 0.9), eps=1e-6, wd=0.3,
                                     excluded=False)
    torch.testing.assert_close(a.detach(), wa)
    torch.testing.assert_close(b.detach(), wb)


def test_zero_weights_take_the_adam_step():
    (w,) = _params(torch.zeros(1, 2))
    w.grad = torch.tensor([[0.5, -2.0]], dtype=DT)
    LAMB([w], lr=0.1, weight_decay=0.1, eps=1e-12).step()
    # ||w|| = 0: ratio 1; u = sign(g) + 0.1 * 0
    torch.testing.assert_close(w.detach(), torch.tensor([[-0.1, 0.1]], dtype=DT))


def test_zero_grads_with_weight_decay_shrink_by_lr():
    (w,) = _params(torch.tensor([[3.0, 4.0]]))
    w.grad = torch.zeros(1, 2, dtype=DT)
    LAMB([w], lr=0.1, weight_decay=0.1).step()
    # r = 0, u = 0.1 w, ratio = ||w|| / ||0.1 w|| = 10: w - 0.1 * 10 * 0.1 w = 0.9 w
    torch.testing.assert_close(w.detach(), torch.tensor([[2.7, 3.6]], dtype=DT))


def test_zero_grads_without_weight_decay_leave_weights():
    (w,) = _params(torch.tensor([[3.0, 4.0]]))
    w.grad = torch.zeros(1, 2, dtype=DT)
    LAMB([w], lr=0.1, weight_decay=0.0).step()
    # u = 0, so ||u|| = 0 gives ratio 1 and a zero step (no 0/0).
    torch.testing.assert_close(w.detach(), torch.tensor([[3.0, 4.0]], dtype=DT))


def test_zero_weights_and_grads_stay_finite():
    (w,) = _params(torch.zeros(2, 2))
    w.grad = torch.zeros(2, 2, dtype=DT)
    opt = LAMB([w], lr=0.1)
    opt.step()
    opt.step()
    assert torch.equal(w.detach(), torch.zeros(2, 2, dtype=DT))


def test_excluded_params_match_torch_adam():
    gen = torch.Generator().manual_seed(5)
    ours = _params(torch.randn(3, 2, generator=gen), torch.randn(3, generator=gen))
    theirs = [nn.Parameter(p.detach().clone()) for p in ours]
    opt = LAMB([{"params": ours, "excluded": True}], lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.5)
    ref = torch.optim.Adam(theirs, lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.0)
    for step_grads in _grads([(3, 2), (3,)], 3, seed=6):
        for p, q, g in zip(ours, theirs, step_grads):
            p.grad, q.grad = g.clone(), g.clone()
        opt.step()
        ref.step()
    for p, q in zip(ours, theirs):
        torch.testing.assert_close(p, q)


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
        zero = torch.zeros_like(p)
        expected, _, _ = _reference_step(before[name], p.grad, zero, zero, 1, lr=lr, betas=(0.9, 0.999),
                                         eps=1e-6, wd=wd, excluded=name in excluded_names)
        torch.testing.assert_close(p.detach(), expected, msg=name)


def test_default_excludes_1d_tensors():
    model = _model()
    opt = LAMB(model.parameters(), lr=0.01, weight_decay=0.1)
    assert opt.param_groups[0]["excluded"] == [False, True, True, True, False, True]
    _check_updates(model, opt, {"0.bias", "1.weight", "1.bias", "2.bias"}, lr=0.01, wd=0.1)


def test_callable_exclusion():
    model = _model()
    opt = LAMB(model.named_parameters(), lr=0.01, weight_decay=0.1, exclude=lambda n, p: n == "2.weight")
    _check_updates(model, opt, {"2.weight"}, lr=0.01, wd=0.1)


def test_name_list_exclusion():
    model = _model()
    opt = LAMB(model.named_parameters(), lr=0.01, weight_decay=0.1, exclude=["1.", "0.bias"])
    _check_updates(model, opt, {"0.bias", "1.weight", "1.bias"}, lr=0.01, wd=0.1)


def test_named_param_groups():
    model = _model()
    opt = LAMB(named_param_groups(model, exclude=["bias"]), lr=0.01, weight_decay=0.1)
    assert [g["param_names"] for g in opt.param_groups] == [["0.weight", "1.weight", "2.weight"],
                                                            ["0.bias", "1.bias", "2.bias"]]
    _check_updates(model, opt, {"0.bias", "1.bias", "2.bias"}, lr=0.01, wd=0.1)


def test_name_exclusion_without_names_is_an_error():
    with pytest.raises(ValueError, match="LAMB: exclude=.* given without names"):
        LAMB(_model().parameters(), lr=0.01, exclude="bias")


def test_skips_params_without_grad():
    a, b = _params(torch.ones(2, 2), torch.ones(2, 2))
    a.grad = torch.ones(2, 2, dtype=DT)
    opt = LAMB([a, b], lr=0.1)
    opt.step()
    assert torch.equal(b.detach(), torch.ones(2, 2, dtype=DT))
    assert b not in opt.state and opt.state[a]["step"] == 1


def test_closure():
    model = _model()
    x = torch.randn(8, 3, dtype=DT)
    opt = LAMB(model.parameters(), lr=0.01)

    def closure():
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss

    first = opt.step(closure)
    assert first.requires_grad and all(opt.state[p]["step"] == 1 for p in model.parameters())


def _train(model, opt, steps, seed):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 3, generator=gen, dtype=DT)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


def test_state_dict_round_trip():
    model = _model()
    opt = LAMB(model.named_parameters(), lr=0.01, exclude=["1."])
    _train(model, opt, 3, seed=8)
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buffer)
    _train(model, opt, 3, seed=9)

    buffer.seek(0)
    saved = torch.load(buffer)
    resumed = _model()
    resumed.load_state_dict(saved["model"])
    opt2 = LAMB(resumed.named_parameters(), lr=0.01, exclude=["1."])
    opt2.load_state_dict(saved["opt"])
    assert all(opt2.state[p]["step"] == 3 for p in resumed.parameters())
    _train(resumed, opt2, 3, seed=9)
    for p, q in zip(model.parameters(), resumed.parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(lr=-1e-3), ValueError, r"lr must be a finite number >= 0, got -0.001"),
        (dict(lr=1e-3, betas=(1.0, 0.999)), ValueError, r"betas\[0\] must be a finite number in \[0, 1\), got 1.0"),
        (dict(lr=1e-3, betas=(0.9, -0.1)), ValueError, r"betas\[1\] must be a finite number in \[0, 1\), got -0.1"),
        (dict(lr=1e-3, betas=(0.9,)), ValueError, r"betas must be a pair"),
        (dict(lr=1e-3, eps=0.0), ValueError, r"eps must be a finite number > 0"),
        (dict(lr=1e-3, weight_decay=-0.01), ValueError, r"weight_decay must be a finite number >= 0"),
        (dict(lr=torch.tensor(1e-3)), TypeError, r"lr must be a finite number >= 0, got tensor\(0.0010\)"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        LAMB([nn.Parameter(torch.zeros(2, 2))], **kwargs)
