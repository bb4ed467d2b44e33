"""The overridden ``optimizer_step`` (a warm-up calling ``optimizer.step(closure=...)``) and
``configure_gradient_clipping`` under strategy ``"fsdp"``: 2 gloo ranks with micro batch 1 end with
the parameters of one process with the global batch 2 (1e-5), with accumulation 2, clipping by
norm and a step-interval scheduler (`tests/loops/hook_module.py`). Lightning's FSDP needs CUDA, so
the one-process run is the reference. One 2-rank job (module fixture) serves every assert.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.helpers.distributed import run_ranks
from tests.loops.hook_module import fit_hook_module

pytest.importorskip("torch.distributed.fsdp", reason="FSDP2 needs torch.distributed")
if not hasattr(torch.distributed.fsdp, "fully_shard"):
    pytest.skip("FSDP2 (fully_shard) needs torch >= 2.6", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def _on_rank(rank: int, world_size: int, root: str) -> dict[str, Any]:
    return fit_hook_module(root, batch_size=1, devices=2, strategy="fsdp")


@pytest.fixture(scope="module")
def fsdp_runs(tmp_path_factory) -> list[dict[str, Any]]:
    return run_ranks(_on_rank, args=(str(tmp_path_factory.mktemp("fsdp")),), init_group=False, timeout=200)


@pytest.mark.timeout(240)
def test_the_overrides_under_fsdp_equal_one_process_with_the_global_batch(fsdp_runs, tmp_path):
    want = fit_hook_module(str(tmp_path), batch_size=2)
    for got in fsdp_runs:
        assert got["global_step"] == want["global_step"] == got["steps"] == 4
        assert got["clipped"] == want["clipped"] == 4
        for a, b in zip(got["params"], want["params"]):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
