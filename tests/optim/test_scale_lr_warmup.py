"""``Trainer(scale_lr=...)`` with a warmup + cosine schedule under DDP (W=2): the learning rate used
at every optimizer step equals the formulas of docs/large-batch.md, computed here; the warmup
ends at the *scaled* rate (W x base for the linear rule, sqrt(W) x base for "sqrt")."""
from __future__ import annotations

import ast
import contextlib
import io
import math
from typing import Any

import pytest
import torch

from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import Trainer
from trainer.optim import warmup

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(150)]

W = 2
BASE_LRS = (0.1, 0.04)  # two param groups: weights, biases
WARMUP, START = 4, 0.25  # warmup steps k, start_factor
T_MAX, ETA_MIN = 6, 0.002  # cosine after the warmup
STEPS = WARMUP + T_MAX  # 64 samples / (W=2 x batch 4) = 8 steps per epoch, so 2 epochs


class WarmupRegression(Regression):
    def __init__(self) -> None:
        super().__init__("sgd")
        self.lrs: list[list[float]] = []

    def configure_optimizers(self) -> Any:
        weights = [p for p in self.parameters() if p.ndim > 1]
        biases = [p for p in self.parameters() if p.ndim <= 1]
        opt = torch.optim.SGD(
            [{"params": weights, "lr": BASE_LRS[0]}, {"params": biases, "lr": BASE_LRS[1]}], momentum=0.9
        )
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=T_MAX, eta_min=ETA_MIN)
        sched = warmup(cosine, warmup_steps=WARMUP, start_factor=START)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.lrs.append([float(g["lr"]) for g in optimizer.param_groups])


def expected_lr(base: float, factor: float, t: int) -> float:
    """The rate at optimizer step t (t scheduler steps taken) for base rate ``base`` x ``factor``."""
    b = base * factor
    if t < WARMUP:
        return b * (START + (1 - START) * t / WARMUP)
    eta = ETA_MIN * factor  # the floor is scaled too
    return eta + (b - eta) * (1 + math.cos(math.pi * (t - WARMUP) / T_MAX)) / 2


def _fits(rank: int, world_size: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    out = {}
    for scale_lr in (True, "sqrt", False):
        module = WarmupRegression()
        trainer = Trainer(accelerator="cpu", max_steps=STEPS, scale_lr=scale_lr, **QUIET)
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            trainer.fit(module, loader(regression_data(64), 4))
        assert trainer.world_size == W and trainer.global_step == STEPS
        out[str(scale_lr)] = module.lrs
        out[f"{scale_lr}-stdout"] = stdout.getvalue()
    return out


@pytest.fixture(scope="module")
def lrs() -> list[dict[str, Any]]:
    return run_ranks(_fits, world_size=W, init_group=False, timeout=120)


@pytest.mark.parametrize("scale_lr, factor", [("True", W), ("sqrt", math.sqrt(W)), ("False", 1.0)])
def test_warmup_reaches_the_scaled_rate_then_decays(lrs, scale_lr, factor):
    for rank in range(W):
        seen = lrs[rank][scale_lr]
        assert len(seen) == STEPS
        for group, base in enumerate(BASE_LRS):
            got = [step[group] for step in seen]
            assert got == pytest.approx([expected_lr(base, factor, t) for t in range(STEPS)], rel=1e-6)
            # The points that matter, spelled out:
            assert got[0] == pytest.approx(START * factor * base, rel=1e-6)  # warmup starts low
            assert got[WARMUP // 2] == pytest.approx((START + (1 - START) / 2) * factor * base, rel=1e-6)
            assert got[WARMUP] == pytest.approx(factor * base, rel=1e-6)  # ends at the scaled rate
            assert got[WARMUP] == max(got)
            assert got[-1] < got[WARMUP + 1] < got[WARMUP]  # then the cosine decays
            halfway = factor * (ETA_MIN + (base - ETA_MIN) / 2)
            assert got[WARMUP + T_MAX // 2] == pytest.approx(halfway, rel=1e-6)
    if scale_lr == "True":  # linear rule: exactly W times the unscaled schedule at every step
        for scaled, plain in zip(lrs[0]["True"], lrs[0]["False"]):
            assert scaled == pytest.approx([W * p for p in plain], rel=1e-6)


@pytest.mark.parametrize("scale_lr, factor", [("True", W), ("sqrt", math.sqrt(W))])
def test_message_shows_the_scaled_peak_not_the_warmup_start(lrs, scale_lr, factor):
    message = [line for line in lrs[0][f"{scale_lr}-stdout"].splitlines() if "[lockstep] scale_lr=" in line]
    assert len(message) == 1 and f"learning rate x{factor:g} for W={W}" in message[0]
    shown = ast.literal_eval(message[0][message[0].rindex("[") :])
    # the rates the warmup climbs to (W x base), not where it starts (START x W x base)
    assert shown == pytest.approx([factor * base for base in BASE_LRS], rel=1e-12)
    assert lrs[0]["False-stdout"] == "" and lrs[1][f"{scale_lr}-stdout"] == ""
