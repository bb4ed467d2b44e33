"""``trainer._accelerator_connector.is_distributed``: Lightning's private attribute that
optuna-integration's pruning callback reads (the census runs that callback end to end)."""
from __future__ import annotations

import pytest

from tests.helpers.optional import importorskip

from trainer import Trainer


@pytest.mark.parametrize("kwargs", [{}, {"strategy": "ddp", "devices": 2}])
def test_is_distributed_answers_as_lightning_s(kwargs):
    ours = Trainer(accelerator="cpu", logger=False, **kwargs)._accelerator_connector.is_distributed
    assert ours is bool(kwargs)
    lightning = importorskip("lightning.pytorch", reason="the comparison needs `lightning` (the dev extra)")
    theirs = lightning.Trainer(accelerator="cpu", logger=False, **kwargs)._accelerator_connector.is_distributed
    assert ours == theirs
