"""examples/image_classifier.py: ResNet-18 on FakeData in 2 processes with SyncBatchNorm,
accumulation, the linear LR scaling, bf16 and channels_last; downloads happen in prepare_data only,
and one that cannot happen is a clear error."""
from __future__ import annotations

import json
import math

import pytest

from tests.helpers.distributed import REPO_ROOT, free_port, run_script
from tests.helpers.optional import importorskip

importorskip("torchvision", reason="examples/image_classifier.py needs torchvision")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
SCRIPT = str(REPO_ROOT / "examples" / "image_classifier.py")


@pytest.mark.distributed
def test_two_processes_with_sync_batchnorm_accumulation_scaled_lr_bf16_channels_last(tmp_path):
    out, data_dir = tmp_path / "result.json", tmp_path / "data"
    proc = run_script(
        [SCRIPT, "--accelerator", "cpu", "--devices", "2", "--fake-size", "64", "--image-size", "32",
         "--batch-size", "8", "--max-epochs", "1", "--num-workers", "0", "--sync-batchnorm",
         "--accumulate", "2", "--scale-lr", "linear", "--precision", "bf16-mixed", "--channels-last",
         "--data-dir", str(data_dir), "--root", str(tmp_path / "run"), "--result-json", str(out)],
        launcher="python",
        timeout=150,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == 2
    assert result["global_step"] == 2  # 64 images / 2 ranks / b=8 = 4 micro batches per rank; A=2
    assert result["global_batch_size"] == 2 * 8 * 2
    assert result["peak_lr"] == pytest.approx(2 * 0.05)  # --lr x W
    assert result["sync_batchnorm_layers"] == 20  # every BatchNorm2d of ResNet-18
    assert result["channels_last"] and result["precision"] == "bf16-mixed"
    assert all(math.isfinite(result[k]) for k in ("train_loss", "val_loss", "val_acc"))
    assert 0.0 <= result["val_acc"] <= 1.0
    assert "val_acc=" in proc.stdout and "world_size=2" in proc.stdout
    assert not data_dir.exists()  # FakeData: nothing downloaded or written
    assert len(list((tmp_path / "run" / "logs").glob("version_*/events.out.tfevents.*"))) == 1


def test_a_download_that_cannot_happen_is_a_clear_error(tmp_path):
    # No network: every request goes to a proxy on a port nothing listens on.
    proxy = f"http://127.0.0.1:{free_port()}"
    offline = {name: proxy for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}
    offline.update(no_proxy="", NO_PROXY="")
    proc = run_script(
        [SCRIPT, "--dataset", "mnist", "--data-dir", str(tmp_path / "data"), "--accelerator", "cpu",
         "--devices", "1", "--root", str(tmp_path / "run")],
        launcher="python",
        env=offline,
        timeout=100,
    )
    assert proc.returncode != 0
    assert f"Could not download mnist into {str(tmp_path / 'data')!r}" in proc.stderr
    assert "--dataset fake" in proc.stderr


def test_setup_reads_the_data_and_never_downloads(tmp_path):
    from examples.image_classifier import ImageData

    with pytest.raises(RuntimeError, match="Dataset not found"):
        ImageData("cifar10", data_dir=str(tmp_path)).setup("fit")
    assert list(tmp_path.iterdir()) == []


def test_bad_arch_and_dataset_are_clear_errors(capsys):
    from examples.image_classifier import ImageData, main

    with pytest.raises(SystemExit) as exit_info:
        main(["--arch", "resnet19"])
    assert exit_info.value.code == 2
    assert "--arch 'resnet19' is not a torchvision.models classifier" in capsys.readouterr().err
    with pytest.raises(ValueError, match="dataset must be one of"):
        ImageData("imagenet")
