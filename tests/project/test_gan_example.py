"""examples/gan.py: manual optimization with two optimizers on 2 processes; images in TensorBoard."""
from __future__ import annotations

import glob
import json
import math

import pytest

from tests.helpers.distributed import REPO_ROOT, run_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]
SCRIPT = str(REPO_ROOT / "examples" / "gan.py")


@pytest.mark.distributed
def test_gan_on_two_processes_logs_losses_and_images(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "result.json"
    proc = run_script(
        [SCRIPT, "--accelerator", "cpu", "--devices", "2", "--train-size", "256", "--batch-size", "32",
         "--max-epochs", "2", "--log-every-n-steps", "1", "--root", str(tmp_path / "run"), "--result-json", str(out)],
        launcher="python",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == 2
    assert result["global_step"] == 2 * 2 * 4  # 2 optimizer steps per batch, 2 epochs, 256 / 2 / 32 batches
    assert result["rank_spread"] == 0.0  # manual_backward averaged the gradients: the same weights
    assert all(math.isfinite(result[k]) for k in ("g_loss", "d_loss", "mode_distance"))
    (events_file,) = glob.glob(f"{result['log_dir']}/events.out.tfevents.*")
    events = EventAccumulator(events_file, size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    assert {"g_loss", "d_loss", "mode_distance"} <= set(events.Tags()["scalars"])
    images = events.Images("density/real_vs_generated")
    assert [image.step for image in images] == [0, 1]  # one per epoch
    assert (images[0].height, images[0].width) == (128, 2 * 128 + 2)
