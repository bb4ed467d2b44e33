"""FSDPStrategy's arguments, the precision it refuses, and `configure_model` / ``"bf16-true"`` in
one process (the 2-rank behaviour is in test_fsdp_training.py)."""
from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch
from torch import nn

from tests.helpers.models import QUIET, Regression, loader, regression_data
from tests.strategies import fsdp_models as fm
from trainer import FSDPStrategy, Trainer
from trainer.accelerators.precision import normalize_precision


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"auto_wrap_policy": "Block"}, TypeError, "FSDPStrategy(auto_wrap_policy=...) takes a set of nn.Module classes"),
        ({"auto_wrap_policy": {nn.Linear, int}}, TypeError, "got <class 'int'> in it"),
        ({"activation_checkpointing_policy": 3}, TypeError, "FSDPStrategy(activation_checkpointing_policy=...) takes"),
        ({"activation_checkpointing_policy": True}, ValueError, "no auto_wrap_policy names them"),
        ({"device_mesh": (2, "a")}, TypeError, "FSDPStrategy(device_mesh=...) takes a DeviceMesh"),
        ({"device_mesh": (1, 1, 2)}, TypeError, "a tuple (replicas, shards) for hybrid sharding"),
        ({"cpu_offload": "yes"}, TypeError, "cpu_offload must be a bool"),
        ({"reshard_after_forward": None}, TypeError, "reshard_after_forward must be a bool"),
    ],
)
def test_bad_fsdp_arguments(kwargs, error, message):
    with pytest.raises(error, match=__import__("re").escape(message)):
        FSDPStrategy(**kwargs)


def test_fp16_loss_scaling_is_refused_under_fsdp():
    with pytest.raises(ValueError, match="precision='16-mixed' is not supported with strategy='fsdp'"):
        Trainer(accelerator="cpu", strategy=FSDPStrategy(), devices=2, precision="16-mixed", **QUIET)


def test_mesh_offload_and_reshard_arguments_are_kept():
    strategy = FSDPStrategy(device_mesh=(1, 2), cpu_offload=True, reshard_after_forward=False)
    assert (strategy.device_mesh, strategy.cpu_offload, strategy.reshard_after_forward) == ((1, 2), True, False)
    assert FSDPStrategy().reshard_after_forward is True


class _CountingLinear(nn.Linear):
    """Counts its forward calls: activation checkpointing runs each block's forward again in backward."""

    calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        type(self).calls += 1
        return super().forward(x)


class _ShardProbe(fm.Blocks):
    """After each forward (before backward): which block parameters are sharded DTensors again."""

    def __init__(self) -> None:
        super().__init__(depth=3, linear=_CountingLinear)
        self.sharded_after_forward: list[set[bool]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        from torch.distributed.tensor import DTensor

        blocks = [m for m in self.modules() if isinstance(m, fm.Block)]
        self.sharded_after_forward.append({isinstance(p, DTensor) for b in blocks for p in b.parameters()})
        return loss


def _is_block(module: nn.Module) -> bool:
    return isinstance(module, fm.Block)


@pytest.mark.skipif(not hasattr(importlib.import_module("torch.distributed.fsdp"), "fully_shard"), reason="FSDP2 (fully_shard) needs torch >= 2.6")
@pytest.mark.parametrize(
    "wrap, checkpointing, reshard",
    [({fm.Block}, True, True), (_is_block, {fm.Block}, False), ({fm.Block}, None, True)],
    ids=["classes-true-reshard", "callable-classes-no-reshard", "classes-no-checkpointing"],
)
def test_policies_shard_checkpoint_and_reshard_what_they_name(wrap, checkpointing, reshard):
    from torch.distributed.fsdp import FSDPModule

    module, steps = _ShardProbe(), 2
    _CountingLinear.calls = 0
    strategy = FSDPStrategy(auto_wrap_policy=wrap, activation_checkpointing_policy=checkpointing, reshard_after_forward=reshard)
    Trainer(accelerator="cpu", strategy=strategy, max_steps=steps, **QUIET).fit(module, loader(regression_data(8), 4))
    units = [type(m).__name__ for m in module.modules() if isinstance(m, FSDPModule)]
    assert sorted(units) == ["FSDPBlock"] * 3 + ["FSDP_ShardProbe"]  # every block its own unit, then the root
    forwards_per_step = 2 if checkpointing else 1  # checkpointed blocks run forward again in backward
    assert _CountingLinear.calls == 3 * steps * forwards_per_step
    # reshard_after_forward=True frees each block's gathered parameters after its forward (only
    # the shards remain until backward gathers them again); False keeps them gathered.
    assert module.sharded_after_forward == [{reshard}] * steps


class Built(Regression):
    """Builds its layers in configure_model; records what it saw there."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        del self.net
        torch.manual_seed(0)
        self.calls: list[torch.dtype] = []

    def configure_model(self) -> None:
        self.calls.append(torch.get_default_dtype())
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def test_configure_model_runs_once_before_setup_and_matches_eager():
    data = regression_data(32)
    built = Built()  # configure_model draws from the RNG as seeded in __init__
    Trainer(accelerator="cpu", max_epochs=1, **QUIET).fit(built, loader(data, 8))
    eager = Regression()
    Trainer(accelerator="cpu", max_epochs=1, **QUIET).fit(eager, loader(data, 8))
    Trainer(accelerator="cpu", **QUIET).test(built, loader(data, 8))  # not built again
    assert built.calls == [torch.float32]
    for a, b in zip(built.parameters(), eager.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_bf16_true_trains_the_whole_module_in_bf16():
    assert normalize_precision("bf16-true") == "bf16-true"
    data = regression_data(32)
    built = Built()
    Trainer(accelerator="cpu", max_epochs=1, precision="bf16-true", **QUIET).fit(built, loader(data, 8))
    assert built.calls == [torch.bfloat16]  # layers created in bf16 directly
    assert torch.get_default_dtype() == torch.float32  # restored
    module, full = Regression(), Regression()  # converted to bf16 by the Trainer
    Trainer(accelerator="cpu", max_epochs=2, precision="bf16-true", **QUIET).fit(module, loader(data, 8))
    Trainer(accelerator="cpu", max_epochs=2, **QUIET).fit(full, loader(data, 8))
    assert {p.dtype for p in module.parameters()} == {torch.bfloat16}
    for a, b in zip(module.parameters(), full.parameters()):
        assert (a.float() - b).abs().max() < 3e-2
    predictions = Trainer(accelerator="cpu", precision="bf16-true", **QUIET).predict(module, loader(data, 8))
    assert predictions[0].dtype == torch.bfloat16
