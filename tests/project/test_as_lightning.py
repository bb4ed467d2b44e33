"""Issue 32 build item 6: ``python -m trainer.as_lightning SCRIPT`` runs an unmodified Lightning
script on Lockstep, the script and the libraries it imports alike, and ends with Lightning's
parameters; Lightning's names that Lockstep lacks (Fabric, the profilers) raise errors naming them, and
Lightning's demos are Lockstep's, module for module."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.helpers.optional import importorskip

REPO = Path(__file__).resolve().parents[2]

# a third-party integration: imports Lightning itself, as such libraries do
THIRD_PARTY = '''
import lightning.pytorch as pl
from pytorch_lightning.utilities import rank_zero_only


class StepCounter(pl.Callback):
    def __init__(self):
        self.steps = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.steps += 1


def lightning_version():
    return pl.__version__
'''

# written the way Lightning's docs write a script
SCRIPT = '''
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

from third_party import StepCounter, lightning_version


class Regressor(L.LightningModule):
    def __init__(self, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


if __name__ == "__main__":
    out = sys.argv[1]
    L.seed_everything(0)
    x = torch.randn(64, 4)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8, shuffle=False)
    model, counter = Regressor(), StepCounter()
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[counter, ModelCheckpoint(dirpath=out + ".ckpts")])
    trainer.fit(model, loader)
    torch.save({"params": model.state_dict(), "trainer": type(trainer).__module__,
                "callback_base": [c.__module__ for c in type(counter).__mro__], "steps": counter.steps,
                "version": lightning_version(), "hparams": dict(model.hparams)}, out)
'''


def _run(tmp_path: Path, *prefix: str) -> dict:
    (tmp_path / "third_party.py").write_text(THIRD_PARTY)
    (tmp_path / "train.py").write_text(SCRIPT)
    out = tmp_path / f"result{len(prefix)}.pt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, *prefix, "train.py", str(out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return torch.load(out, weights_only=False)


@pytest.mark.launches
def test_an_unmodified_lightning_script_runs_on_lockstep_with_lightning_s_numbers(tmp_path):
    ours = _run(tmp_path, "-m", "trainer.as_lightning")
    assert ours["trainer"] == "trainer.trainer"  # Lockstep's Trainer, for the script
    assert "callbacks.callback" in ours["callback_base"]  # and for the library it imports
    assert ours["steps"] == 16 and ours["hparams"] == {"lr": 0.05}
    from trainer.lightning_alias import LIGHTNING_API_VERSION

    assert ours["version"] == LIGHTNING_API_VERSION
    importorskip("lightning", reason="the comparison needs `lightning` (the dev extra)")
    theirs = _run(tmp_path)
    assert theirs["trainer"].startswith("lightning.pytorch")
    assert theirs["steps"] == ours["steps"] and theirs["hparams"] == ours["hparams"]
    for name, value in theirs["params"].items():
        torch.testing.assert_close(ours["params"][name], value, atol=1e-6, rtol=0)


IN_PROCESS = textwrap.dedent('''
    import sys
    import trainer.as_lightning  # the notebook form: first
    import lightning as L
    import lightning.pytorch as pl
    import pytorch_lightning
    import trainer, callbacks
    from lightning.pytorch.callbacks.model_checkpoint import ModelCheckpoint
    from lightning.pytorch.utilities.rank_zero import rank_zero_only
    from lightning.pytorch.utilities.types import STEP_OUTPUT
    from lightning.fabric.utilities.types import _MAP_LOCATION_TYPE, _PATH  # pytorch-forecasting's annotations
    import trainer.fabric_types
    from lightning.pytorch.trainer.states import RunningStage, TrainerFn  # pytorch-forecasting's stage names
    import trainer.stage
    assert RunningStage is trainer.stage.RunningStage and TrainerFn.FITTING == "fit"
    assert _PATH is trainer.fabric_types._PATH and _MAP_LOCATION_TYPE is trainer.fabric_types._MAP_LOCATION_TYPE
    from lightning.pytorch.callbacks import *  # noqa: F403
    assert EarlyStopping is callbacks.EarlyStopping
    assert L.Trainer is pl.Trainer is pytorch_lightning.Trainer is trainer.Trainer
    assert L.pytorch.LightningModule is trainer.TrainModule and L.Callback is callbacks.Callback
    assert ModelCheckpoint is callbacks.ModelCheckpoint and rank_zero_only is trainer.rank_zero_only
    assert pl.__version__ == L.__version__ == trainer.as_lightning.LIGHTNING_API_VERSION
    assert not hasattr(pl.callbacks, "ModelPruning") and not hasattr(L, "Fabric")
    import trainer.demos.boring_classes, trainer.demos.mnist_datamodule
    from lightning.pytorch.demos import BoringModel, Transformer
    from lightning.pytorch.demos.boring_classes import RandomDataset
    from lightning.pytorch.demos.mnist_datamodule import MNISTDataModule
    assert BoringModel is trainer.demos.BoringModel and Transformer is trainer.demos.Transformer
    assert RandomDataset is trainer.demos.boring_classes.RandomDataset
    assert MNISTDataModule is trainer.demos.mnist_datamodule.MNISTDataModule
    assert "lightning" not in {m.split(".")[0] for m in sys.modules if m.startswith("lightning.") and
                               getattr(sys.modules[m], "__file__", None)}, "the real Lightning was imported"
    for statement, named in [
        ("from lightning.pytorch.callbacks import ModelPruning", "ModelPruning"),
        ("from lightning import Fabric", "Fabric"),
        ("from lightning.fabric import Fabric", "Lightning Fabric"),
        ("import lightning.fabric.strategies", "Lightning Fabric"),
        ("from lightning_fabric.utilities import rank_zero_only", "Lightning Fabric"),
        ("from lightning.pytorch.profilers import NoSuchProfiler", "NoSuchProfiler"),  # issue 41: the classes resolve
        ("from lightning.pytorch.strategies import ModelParallelStrategy", "ModelParallelStrategy"),
        ("from lightning.pytorch.utilities import is_picklable", "is_picklable"),
    ]:
        try:
            exec(statement)
        except ImportError as err:
            assert named in str(err) and "not provided by Lockstep" in str(err), (statement, str(err))
        else:
            raise AssertionError(statement + " did not raise")
    print("ok")
''')


@pytest.mark.launches
def test_the_in_process_form_aliases_every_lightning_name_and_names_what_is_missing(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", IN_PROCESS], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr


@pytest.mark.launches
def test_importing_it_after_lightning_is_refused(tmp_path):
    importorskip("lightning", reason="needs `lightning` (the dev extra)")
    done = subprocess.run([sys.executable, "-c", "import lightning.pytorch\nimport trainer.as_lightning"],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0 and "must be imported before Lightning" in done.stderr


def test_lightning_s_module_names_map_to_lockstep_s():
    from trainer.lightning_alias import lockstep_module_for

    assert lockstep_module_for("lightning") == "trainer"
    assert lockstep_module_for("lightning.pytorch") == "trainer"
    assert lockstep_module_for("pytorch_lightning") == "trainer"
    assert lockstep_module_for("lightning.pytorch.callbacks.model_checkpoint") == "trainer.callbacks"
    assert lockstep_module_for("pytorch_lightning.loggers") == "trainer.loggers"
    assert lockstep_module_for("lightning.pytorch.callbacks.progress.tqdm_progress") == "trainer.callbacks"
    # a name inside a module is not a module: `from ...parsing import get_init_args` reads the attribute
    assert lockstep_module_for("lightning.pytorch.utilities.parsing.get_init_args") is None
    assert lockstep_module_for("lightning.pytorch.serve") == ""  # Lightning's, not provided
    # issue 41: the checkpoint I/O plugins; issue 44: the cluster environments
    assert lockstep_module_for("lightning.pytorch.plugins.io") == "trainer.lightning.plugins"
    assert lockstep_module_for("lightning.pytorch.plugins.environments") == "trainer.lightning.environments"
    assert lockstep_module_for("lightning.pytorch.demos") == "trainer.demos"
    assert lockstep_module_for("lightning.pytorch.demos.boring_classes") == "trainer.demos.boring_classes"  # module for module
    assert lockstep_module_for("lightning_utilities") is None  # not an alias: found as usual
    assert lockstep_module_for("torchmetrics") is None


def test_the_list_of_lightning_s_subpackages_is_the_installed_lightning_s():
    importorskip("lightning", reason="needs `lightning` (the dev extra)")
    import importlib.util
    from pathlib import Path

    from trainer.lightning_alias import SUBPACKAGES

    root = Path(importlib.util.find_spec("lightning.pytorch").origin).parent
    found = {".".join(p.parent.relative_to(root).parts) for p in root.glob("*/*/**/__init__.py")}
    assert SUBPACKAGES == found


def test_get_init_args_reads_an_init_frame_as_lightning_s():
    pl_parsing = importorskip("lightning.pytorch.utilities.parsing", reason="needs `lightning` (the dev extra)")
    import inspect

    from trainer.utilities import get_init_args

    frames = []

    class Base:
        def __init__(self, a, b=2, *args, **kwargs):
            frames.append(inspect.currentframe())
            super().__init__()

    Base(1, 3, 4, c=5)
    assert get_init_args(frames[0]) == pl_parsing.get_init_args(frames[0]) == {"a": 1, "b": 3, "c": 5}
    assert get_init_args(inspect.currentframe()) == {}


_USAGE = "usage: python -m trainer.as_lightning SCRIPT [ARGS] | -m MODULE [ARGS] | --entry NAME [ARGS]\n"


@pytest.mark.launches
@pytest.mark.parametrize(
    "args, err",
    [
        ([], _USAGE),
        (["-m"], _USAGE),
        (["--entry"], _USAGE),
        (["nosuch.py", "--max_epochs", "1"], "python -m trainer.as_lightning: error: no such script: 'nosuch.py'\n"),
        (["--entry", "no-such-console-script-of-anyone"],
         "python -m trainer.as_lightning: error: no installed console script 'no-such-console-script-of-anyone'\n"),
    ],
)
def test_a_usage_error_of_the_runner_is_one_line_and_exit_status_2(tmp_path, args, err):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "trainer.as_lightning", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", err)


_LIBRARY_CLI = """
import json, sys
import torch
import lightning.pytorch as pl
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main():
    trainer = pl.Trainer(accelerator="cpu", max_steps=2, logger=False, enable_progress_bar=False,
                         enable_checkpointing=False, enable_model_summary=False)
    trainer.fit(M(), DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4))
    print(json.dumps([type(trainer).__module__.split(".")[0], trainer.global_step, sys.argv]))
    return 3
"""


@pytest.mark.launches
@pytest.mark.timeout(300)
def test_a_librarys_console_script_runs_on_lockstep_with_its_arguments_and_exit_status(tmp_path):
    # an installed distribution declaring a console script, as pip leaves it in site-packages
    site = tmp_path / "site"
    (site / "mylib").mkdir(parents=True)
    (site / "mylib" / "__init__.py").write_text("")
    (site / "mylib" / "cli.py").write_text(_LIBRARY_CLI)
    info = site / "mylib-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mylib\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[console_scripts]\nmylib-train = mylib.cli:main\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(site)])}
    done = subprocess.run([sys.executable, "-m", "trainer.as_lightning", "--entry", "mylib-train", "--epochs", "2"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280)
    assert done.returncode == 3, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["trainer", 2, ["mylib-train", "--epochs", "2"]]
    misspelled = subprocess.run([sys.executable, "-m", "trainer.as_lightning", "--entry", "mylib-trian"],
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert (misspelled.returncode, misspelled.stderr) == (
        2, "python -m trainer.as_lightning: error: no installed console script 'mylib-trian' (did you mean 'mylib-train'?)\n")
