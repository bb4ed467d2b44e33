"""FSDPStrategy's arguments, the precision it refuses, and `configure_model` / ``"bf16-true"`` in
one process (the 2-rank behaviour is in test_fsdp_training.py)."""
from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from tests.helpers.models import QUIET, Regression, loader, regression_data
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


def test_policies_accept_classes_callables_and_true():
    FSDPStrategy(auto_wrap_policy={nn.Linear}, activation_checkpointing_policy=True)
    FSDPStrategy(auto_wrap_policy=lambda m: isinstance(m, nn.Linear), activation_checkpointing_policy={nn.Linear})
    FSDPStrategy(device_mesh=(1, 2), cpu_offload=True, reshard_after_forward=False)


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
