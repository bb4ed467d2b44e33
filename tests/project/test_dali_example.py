"""examples/dali_classifier.py on two ranks: each reads its DALI shard, and the classifier learns."""
from __future__ import annotations

import json

import pytest

from tests.helpers.distributed import REPO_ROOT, run_script
from tests.helpers.optional import importorskip

pytest.importorskip("nvidia.dali", reason="NVIDIA DALI is not installed (the `dali` extra)")
importorskip("torchvision", reason="examples/dali_classifier.py writes its images with torchvision")

SCRIPT = str(REPO_ROOT / "examples" / "dali_classifier.py")


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_dali_classifier_on_two_ranks(tmp_path):
    out = tmp_path / "result.json"
    proc = run_script(
        [SCRIPT, "--accelerator", "cpu", "--devices", "2", "--root", str(tmp_path / "run"), "--result-json", str(out)],
        launcher="python",
        timeout=150,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == 2
    # 180 training images: 90 per rank's shard, 16 per batch, the last one filled: 6 batches
    assert result["batches_per_epoch"] == 6 and result["global_step"] == 6 * 6
    assert result["val_acc"] >= 0.9
    images = tmp_path / "run" / "images"
    assert len(list((images / "train").glob("*/*.png"))) == 180  # written once, by local rank 0
    assert len(list((images / "val").glob("*/*.png"))) == 60
