"""examples/ddp_from_scratch.py: the hand-written DDP + accumulation loop, Trainer(strategy=
"allreduce") and Trainer(strategy="ddp") end with the same parameters on 2 processes."""
from __future__ import annotations

import re

import pytest
import torch

from tests.helpers.distributed import REPO_ROOT, run_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]
SCRIPT = str(REPO_ROOT / "examples" / "ddp_from_scratch.py")


@pytest.mark.distributed
def test_by_hand_allreduce_and_ddp_end_with_the_same_parameters():
    proc = run_script([SCRIPT, "--accelerator", "cpu", "--nproc", "2"], launcher="python", timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    diffs = re.findall(r"max \|(.+?) - (.+?)\| = (\S+)", proc.stdout)
    assert [(a, b) for a, b, _ in diffs] == [("by hand", "allreduce"), ("by hand", "ddp"), ("allreduce", "ddp")]
    assert all(float(d) <= 1e-5 for _, _, d in diffs), diffs
    assert "OK: the three runs end with the same parameters" in proc.stdout
    # 2 processes x 4 samples x 3 micro batches; it trained
    before, after = map(float, re.search(r"global batch 24; loss on all data (\S+) before, (\S+) after", proc.stdout).groups())
    assert after < before / 2


def test_a_difference_above_the_tolerance_is_a_mismatch():
    from examples.ddp_from_scratch import compare

    lines, ok = compare({"a": torch.zeros(3), "b": torch.tensor([0.0, 2e-5, 0.0]), "c": torch.zeros(3)}, 1e-5)
    assert not ok
    assert lines == ["max |a - b| = 2.000e-05", "max |a - c| = 0.000e+00", "max |b - c| = 2.000e-05"]
    assert compare({"a": torch.zeros(3), "b": torch.full((3,), 1e-6)}, 1e-5)[1]
