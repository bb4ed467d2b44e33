"""Exact loss normalization: ``{"loss": summed_loss, "num_items": n}`` gives the token mean of the
whole global batch, under DDP (W=2) with accumulation (A=3) and in one process, while the plain
mean of per-micro-batch means does not.

The reference is a plain PyTorch loop over the global batches (no Trainer): loss = sum over every
real token of the global batch / number of those tokens.
"""
from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET, assert_params_close, params_of
from trainer import Trainer, TrainModule

pytestmark = pytest.mark.timeout(180)

N, MAX_LEN, FEATURES = 24, 8, 3  # 24 padded sequences of 1..8 tokens
W, A, B = 2, 3, 2  # world size, accumulation, micro batch: global batch 12, 2 steps per epoch
EPOCHS = 2
CLIP = 0.05  # below every step's gradient norm below, so clipping acts on every step


def sequence_data(n: int = N, seed: int = 0) -> TensorDataset:
    """Padded variable-length sequences: (x [n, L, F], y [n, L], mask [n, L]); lengths 1..L."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, MAX_LEN + 1, (n,), generator=g)
    lengths[:4] = torch.tensor([1, MAX_LEN, 1, MAX_LEN])  # make sure lengths really differ
    mask = (torch.arange(MAX_LEN)[None, :] < lengths[:, None]).float()
    x = torch.randn(n, MAX_LEN, FEATURES, generator=g) * mask[..., None]
    w = torch.randn(FEATURES, generator=g)
    # Long sequences have a different target scale than short ones: a per-sequence mean weights
    # a 1-token sequence like an 8-token one, which the token mean does not.
    y = (x @ w + 0.5 * lengths[:, None].float() + 0.1 * torch.randn(n, MAX_LEN, generator=g)) * mask
    return TensorDataset(x, y, mask)


class TokenRegressor(TrainModule):
    """A per-token MLP. ``mode="sum"`` returns the summed loss and the token count, ``"mean"``
    the micro batch's token mean; ``"sum-first"`` / ``"mean-first"`` mix them in one window
    (a sum for the first micro batch of each window and a mean for the others, or the reverse),
    which is an error; ``"by-window"`` returns sums in even windows and means in odd ones."""

    def __init__(self, mode: str = "sum", optimizer: str = "sgd") -> None:
        super().__init__()
        self.mode, self.optimizer = mode, optimizer
        torch.manual_seed(0)
        self.net = make_net()
        self.grad_norms: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y, mask = batch
        summed = token_sq_error(self.net, x, y, mask)
        first, even_window = batch_idx % A == 0, batch_idx // A % 2 == 0
        if (
            self.mode == "sum"
            or (self.mode == "sum-first" and first)
            or (self.mode == "mean-first" and not first)
            or (self.mode == "by-window" and even_window)
        ):
            return {"loss": summed, "num_items": mask.sum()}
        return summed / mask.sum()

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.grad_norms.append(grad_norm(self.parameters()))

    def configure_optimizers(self) -> Any:
        return make_optimizer(self.optimizer, self.parameters())


def make_net() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 8), nn.Tanh(), nn.Linear(8, 1))


def token_sq_error(net: nn.Module, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (((net(x).squeeze(-1) - y) ** 2) * mask).sum()


def grad_norm(params: Any) -> float:
    return torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None])).item()


def make_optimizer(name: str, params: Any) -> torch.optim.Optimizer:
    if name == "adamw":
        return torch.optim.AdamW(params, lr=0.02, weight_decay=0.01)
    return torch.optim.SGD(params, lr=0.02, momentum=0.9)


def global_batches(world_size: int, micro: int, accumulate: int) -> list[list[int]]:
    """The sample indices of each optimizer step's global batch, as the ranks see them: rank r
    gets dataset positions r, r + W, r + 2W, ... (DistributedSampler, shuffle=False), in micro
    batches of ``micro``; each rank's window is ``accumulate`` of those."""
    per_rank = [list(range(r, N, world_size)) for r in range(world_size)]
    window = micro * accumulate
    steps = len(per_rank[0]) // window
    return [
        [i for r in range(world_size) for i in per_rank[r][s * window:(s + 1) * window]]
        for s in range(steps)
    ]


def reference(
    optimizer: str, batches: list[list[int]], clip: float | None = None
) -> tuple[list[torch.Tensor], list[float]]:
    """One process, whole global batches, token-mean loss; returns parameters and pre-clip norms."""
    x, y, mask = sequence_data().tensors
    torch.manual_seed(0)
    net = make_net()
    opt = make_optimizer(optimizer, net.parameters())
    norms = []
    for _ in range(EPOCHS):
        for idx in batches:
            loss = token_sq_error(net, x[idx], y[idx], mask[idx]) / mask[idx].sum()
            loss.backward()
            norms.append(grad_norm(net.parameters()))
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
    return params_of(net), norms


def fit(module: TokenRegressor, micro: int, accumulate: int, **kwargs: Any) -> Trainer:
    trainer = Trainer(accelerator="cpu", max_epochs=EPOCHS, accumulate_grad_batches=accumulate, **QUIET, **kwargs)
    trainer.fit(module, DataLoader(sequence_data(), batch_size=micro, shuffle=False))
    return trainer


def _two_ranks(rank: int, world_size: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    out: dict[str, Any] = {}
    for name, mode, optimizer, kwargs in [
        ("sum-sgd", "sum", "sgd", {}),
        ("sum-adamw", "sum", "adamw", {}),
        ("mean-sgd", "mean", "sgd", {}),
        ("mean-adamw", "mean", "adamw", {}),
        ("sum-sgd-clip", "sum", "sgd", {"gradient_clip_val": CLIP}),
        ("allreduce-sum-sgd", "sum", "sgd", {"strategy": "allreduce"}),
    ]:
        module = TokenRegressor(mode, optimizer)
        trainer = fit(module, B, A, **kwargs)
        assert trainer.world_size == W and trainer.global_step == EPOCHS * N // (W * A * B)
        out[name] = (params_of(module), module.grad_norms)
    return out


@pytest.fixture(scope="module")
def two_ranks() -> list[dict[str, Any]]:
    return run_ranks(_two_ranks, world_size=W, init_group=False, timeout=150)


@pytest.mark.distributed
@pytest.mark.slow
def test_two_ranks_accumulation_equals_token_mean_of_the_global_batch(two_ranks):
    batches = global_batches(W, B, A)
    assert [len(b) for b in batches] == [W * A * B] * 2
    lengths = sequence_data().tensors[2].sum(1)
    assert len(set(lengths.tolist())) > 3  # the items really have different sizes
    for optimizer in ("sgd", "adamw"):
        ref, _ = reference(optimizer, batches)
        for rank in range(W):
            params, _ = two_ranks[rank][f"sum-{optimizer}"]
            assert_params_close(params, ref, atol=1e-5)
            if optimizer == "sgd":  # the "allreduce" strategy averages gradients after backward instead
                assert_params_close(two_ranks[rank]["allreduce-sum-sgd"][0], ref, atol=1e-5)
            # Not vacuous: the mean of per-micro-batch means ends elsewhere.
            wrong, _ = two_ranks[rank][f"mean-{optimizer}"]
            assert max((a - b).abs().max().item() for a, b in zip(wrong, ref)) > 1e-4
            # The optimizer actually moved the parameters.
            start = params_of(TokenRegressor())
            assert max((a - b).abs().max().item() for a, b in zip(params, start)) > 1e-2


@pytest.mark.distributed
@pytest.mark.slow
def test_two_ranks_gradient_clipping_sees_the_normalised_gradients(two_ranks):
    ref, ref_norms = reference("sgd", global_batches(W, B, A), clip=CLIP)
    assert min(ref_norms) > CLIP  # clipping acted at every step
    for rank in range(W):
        params, norms = two_ranks[rank]["sum-sgd-clip"]
        assert norms == pytest.approx(ref_norms, rel=1e-5, abs=1e-6)
        assert_params_close(params, ref, atol=1e-5)
        # the unclipped run's hook saw the same first norm (same parameters at step 1)
        assert two_ranks[rank]["sum-sgd"][1][0] == pytest.approx(ref_norms[0], rel=1e-5)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_one_process_accumulation_equals_one_big_batch(optimizer):
    batches = global_batches(1, B, A)  # [0..5], [6..11], ...
    assert batches[0] == list(range(A * B))
    ref, ref_norms = reference(optimizer, batches)
    module = TokenRegressor("sum", optimizer)
    trainer = fit(module, B, A)
    assert trainer.global_step == EPOCHS * N // (A * B)
    assert_params_close(params_of(module), ref, atol=1e-5)
    assert module.grad_norms == pytest.approx(ref_norms, rel=1e-5, abs=1e-6)
    wrong = TokenRegressor("mean", optimizer)
    fit(wrong, B, A)
    assert max((a - b).abs().max().item() for a, b in zip(params_of(wrong), ref)) > 1e-4


@pytest.mark.parametrize("mode", ["sum-first", "mean-first"])
def test_mixing_num_items_and_plain_losses_in_one_window_raises(mode):
    message = r"'num_items' for some micro batches of an accumulation window.*batch index 1"
    with pytest.raises(ValueError, match=message):
        fit(TokenRegressor(mode), B, A)


def test_windows_may_differ():
    """Only mixing inside one window is an error: a sum window followed by a mean window trains."""
    module = TokenRegressor("by-window")
    trainer = fit(module, B, A)
    assert trainer.global_step == EPOCHS * N // (A * B)
    assert all(math.isfinite(n) for n in module.grad_norms)
