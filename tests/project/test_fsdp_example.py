"""examples/fsdp_example.py trains on 2 CPU ranks under FSDP: the loss is finite and falls."""
from __future__ import annotations

import json
import math

import pytest
import torch.distributed.fsdp

from tests.helpers.distributed import REPO_ROOT, run_script

pytestmark = [pytest.mark.slow, pytest.mark.distributed, pytest.mark.timeout(240)]
if not hasattr(torch.distributed.fsdp, "fully_shard"):
    pytest.skip("FSDP2 (fully_shard) needs torch >= 2.6", allow_module_level=True)
SCRIPT = str(REPO_ROOT / "examples" / "fsdp_example.py")


def test_fsdp_example_trains_on_two_ranks(tmp_path):
    out = tmp_path / "result.json"
    proc = run_script(
        [SCRIPT, "--accelerator", "cpu", "--devices", "2", "--max-epochs", "3", "--train-size", "512",
         "--activation-checkpointing", "--root", str(tmp_path / "run"), "--result-json", str(out)],
        launcher="python",
        timeout=220,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == 2
    losses = result["losses"]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] - 0.3, losses
