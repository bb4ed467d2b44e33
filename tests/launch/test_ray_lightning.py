"""Route 2 of docs/ray.md: a Lightning script written for Ray Train (``ray.train.lightning``) under
``python -m trainer.as_lightning`` gives Lightning's numbers under the same Ray (a differential test).

Each run is tests/scripts/ray_lightning_fit.py in its own process, with its own local Ray cluster
(2 CPUs, 2 workers, gloo): the runner's alias reaches Ray's workers as the children of the process
it started, so the cluster cannot be the one tests/launch/test_ray.py's fixture starts in this
process (its workers would import the installed Lightning).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.optional import importorskip

pytest.importorskip("ray")
importorskip("lightning.pytorch", reason="Lightning 2.x (the `dev` extra) is what the numbers are compared with")

pytestmark = [pytest.mark.launches, pytest.mark.distributed, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "scripts" / "ray_lightning_fit.py"


def _run(tmp: Path, name: str, runner: list[str]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a cluster of its own
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    out = tmp / f"{name}.pt"
    done = subprocess.run(
        [sys.executable, *runner, str(SCRIPT), str(out), str(tmp / f"{name}-storage")],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=420,
    )
    assert done.returncode == 0, f"{name}: {done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return torch.load(out, weights_only=False)


@pytest.mark.timeout(900)
def test_a_ray_train_lightning_script_gives_lightnings_numbers_under_the_runner(tmp_path):
    want = _run(tmp_path, "lightning", [])
    got = _run(tmp_path, "lockstep", ["-m", "trainer.as_lightning"])
    assert want["trainer"].startswith("lightning.") and got["trainer"] == "trainer.trainer"  # who ran in Ray's workers
    assert got["global_step"] == want["global_step"] == 10  # 37 samples padded to 19 a rank: 5 batches of 4
    for a, b in zip(got["params"], want["params"], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    # RayTrainReportCallback reports once per epoch, and Lockstep's own RayReportCallback stays out
    assert got["callbacks"] == want["callbacks"] == ["RayTrainReportCallback"]
    assert [r[:2] for r in got["reports"]] == [r[:2] for r in want["reports"]] == [(0, 5), (1, 10)]
    assert [r[2] for r in got["reports"]] == pytest.approx([r[2] for r in want["reports"]], abs=1e-5)
    assert got["checkpoint_files"] == want["checkpoint_files"] == ["checkpoint.ckpt"]
