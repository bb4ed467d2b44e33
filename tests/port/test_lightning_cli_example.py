"""Issue 22's acceptance for `LightningCLI`: Lightning's own ``examples/pytorch/basics/autoencoder.py``
(kept unchanged in ``lightning_examples/cli_autoencoder.py``) runs on Lockstep with only its import
lines renamed: ``run=False`` usage (``cli.trainer.fit/test/predict`` with ``cli.model`` and
``cli.datamodule``), ``trainer_defaults`` with a callback, ``seed_everything_default``,
``save_config_kwargs``; ``--print_config``; and the saved ``config.yaml`` fed back with ``--config``.
MNIST is replaced by a synthetic stand-in of the same size (no download)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.distributed import REPO_ROOT
from tests.helpers.optional import importorskip
from tests.port.porting import EXAMPLES

pytest.importorskip("jsonargparse", reason="LightningCLI needs the 'cli' extra (jsonargparse)")
importorskip("torchvision", reason="Lightning's autoencoder example draws its images with torchvision")

RENAMES = {
    "from lightning.pytorch import LightningDataModule, LightningModule, Trainer, callbacks, cli_lightning_logo":
        "import callbacks; from trainer import LightningDataModule, LightningModule, Trainer; from trainer.cli import cli_lightning_logo",
    "from lightning.pytorch.cli import LightningCLI": "from trainer.cli import LightningCLI",
    "from lightning.pytorch.demos.mnist_datamodule import MNIST": "from tests.port.fake_mnist import MNIST",
    "from lightning.pytorch.utilities import rank_zero_only": "from trainer import rank_zero_only",
    "from lightning.pytorch.utilities.imports import _TORCHVISION_AVAILABLE": "from tests.port.fake_mnist import _TORCHVISION_AVAILABLE",
}
SMALL = [
    "--trainer.accelerator=cpu", "--trainer.max_epochs=1", "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1", "--trainer.limit_test_batches=1", "--trainer.limit_predict_batches=1",
    "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", "--trainer.default_root_dir=run",
]


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    original = (EXAMPLES / "cli_autoencoder.py").read_text().split("\n")
    ported = [RENAMES.get(line, line) for line in original]
    changed = [line for line, new in zip(original, ported) if line != new]
    assert sorted(changed) == sorted(RENAMES)  # every rename applied, only import lines touched
    assert all(line.startswith(("import ", "from ")) for line in changed)
    path = tmp_path_factory.mktemp("cli") / "autoencoder.py"
    path.write_text("\n".join(ported))
    return path


def _run(script, *args):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, str(script), *args], cwd=script.parent, env=env, capture_output=True, text=True, timeout=170
    )


@pytest.mark.timeout(360)
@pytest.mark.launches
def test_lightning_cli_example_runs_prints_and_reloads_its_config(script):
    first = _run(script, *SMALL, "--model.hidden_dim=16")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "tensor(" in first.stdout  # print(predictions[0])
    saved = script.parent / "run" / "logs" / "version_0" / "config.yaml"
    text = saved.read_text()
    assert "hidden_dim: 16" in text and "seed_everything: 1234" in text and "max_epochs: 1" in text
    assert (script.parent / "grid_ori_0.png").exists()  # trainer_defaults' callback ran

    printed = _run(script, "--config", str(saved), "--print_config")
    assert printed.returncode == 0, printed.stderr[-3000:]
    assert "hidden_dim: 16" in printed.stdout and "limit_train_batches: 2" in printed.stdout

    again = _run(script, "--config", str(saved))  # the saved config alone repeats the run
    assert again.returncode == 0, again.stderr[-3000:]
    assert (script.parent / "run" / "logs" / "version_1" / "config.yaml").read_text() == text
