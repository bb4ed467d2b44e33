"""The core claim: DDP(W=2, micro b=4, A=2) ends with the parameters of one process with batch 16."""
from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET, Regression, assert_params_close, loader, params_of, regression_data
from trainer import Trainer, TrainModule

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]


class BNNet(TrainModule):
    """A model whose BatchNorm makes per-rank statistics differ from global ones."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def _single(module, batch_size, accumulate):
    Trainer(accelerator="cpu", max_epochs=2, accumulate_grad_batches=accumulate, **QUIET).fit(module, loader(regression_data(64), batch_size))
    return params_of(module) + [b.clone() for b in module.buffers()]


def _ddp_runs(rank: int, world_size: int) -> dict[str, list[torch.Tensor]]:
    torch.set_num_threads(1)
    data = regression_data(64)
    out = {}
    for name, make, kw in [
        ("ddp-sgd", lambda: Regression("sgd"), {}),
        ("ddp-adamw", lambda: Regression("adamw"), {}),
        ("allreduce-sgd", lambda: Regression("sgd"), {"strategy": "allreduce"}),
        ("allreduce-adamw", lambda: Regression("adamw"), {"strategy": "allreduce"}),
        ("ddp-syncbn", BNNet, {"sync_batchnorm": True}),
    ]:
        module = make()
        trainer = Trainer(accelerator="cpu", max_epochs=2, accumulate_grad_batches=2, **QUIET, **kw)
        trainer.fit(module, loader(data, 4))
        assert trainer.world_size == 2 and trainer.global_step == 8
        out[name] = params_of(module) + [b.clone() for b in module.buffers()]
    return out


@pytest.fixture(scope="module")
def ddp_results():
    return run_ranks(_ddp_runs, world_size=2, init_group=False, timeout=150)


@pytest.mark.parametrize("name, optimizer", [("ddp-sgd", "sgd"), ("ddp-adamw", "adamw"),
                                             ("allreduce-sgd", "sgd"), ("allreduce-adamw", "adamw")])
def test_equals_one_process_with_the_global_batch(ddp_results, name, optimizer):
    reference = _single(Regression(optimizer), batch_size=16, accumulate=1)
    for rank in (0, 1):
        assert_params_close(ddp_results[rank][name], reference, atol=1e-5)


def test_sync_batchnorm_equals_batchnorm_over_the_global_micro_batch(ddp_results):
    reference = _single(BNNet(), batch_size=8, accumulate=2)
    for rank in (0, 1):
        assert_params_close(ddp_results[rank]["ddp-syncbn"], reference, atol=1e-5)


def test_plain_batchnorm_under_ddp_differs(ddp_results):
    """Without SyncBatchNorm the per-rank statistics change the result: the test above is not vacuous."""
    reference = _single(BNNet(), batch_size=8, accumulate=2)
    local = _single(BNNet(), batch_size=4, accumulate=4)
    diffs = [(a - b).abs().max().item() for a, b in zip(local, reference)]
    assert max(diffs) > 1e-4
