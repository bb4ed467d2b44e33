"""Issue 41 build item 2: the extension points libraries built on Lightning plug into, run by the
same script under the installed Lightning and under ``python -m trainer.as_lightning``: a library's
own checkpoint I/O (``Trainer(plugins=[CheckpointIO])``), accelerator objects
(``Trainer(accelerator=CPUAccelerator())``)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.distributed import script_env
from tests.helpers.optional import importorskip

pytestmark = [pytest.mark.launches, pytest.mark.timeout(300)]

MODEL = '''
import json, os, sys
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import lightning.pytorch as pl

SCORES = [3.0, 1.0, 2.0, 0.0, 5.0, 4.0]  # the monitored value of each epoch: top-1 keeps epochs 0, 1, 3


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        self.log("score", SCORES[self.current_epoch])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader():
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)), batch_size=4)


def trainer(**kwargs):
    defaults = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    return pl.Trainer(**{**defaults, **kwargs})
'''

CHECKPOINT_IO = MODEL + '''
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

calls = []


class RecordingIO(CheckpointIO):  # a library's own checkpoint I/O
    def save_checkpoint(self, checkpoint, path, storage_options=None):
        calls.append(["save", os.path.basename(path)])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save(checkpoint, path)

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        calls.append(["load", os.path.basename(path)])
        return torch.load(path, map_location="cpu", weights_only=False)

    def remove_checkpoint(self, path):
        calls.append(["remove", os.path.basename(path)])
        os.remove(path)


class Subclassed(TorchCheckpointIO):  # Lightning's own, subclassed
    def remove_checkpoint(self, path):
        calls.append(["torch_io remove", os.path.basename(path)])
        super().remove_checkpoint(path)


pl.seed_everything(0)
top1 = ModelCheckpoint(dirpath="ckpt", save_top_k=1, monitor="score", mode="min")
trainer(max_epochs=4, callbacks=[top1], plugins=[RecordingIO()]).fit(M(), loader(), loader())
best = top1.best_model_path
calls.append(["best", os.path.basename(best), sorted(os.listdir("ckpt"))])
resumed = ModelCheckpoint(dirpath="ckpt2", save_top_k=1, monitor="score", mode="min")
run = trainer(max_epochs=6, callbacks=[resumed], plugins=RecordingIO())
run.fit(M(), loader(), loader(), ckpt_path=best)
calls.append(["resumed at", run.global_step, run.current_epoch])
torch_top1 = ModelCheckpoint(dirpath="ckpt3", save_top_k=1, monitor="score", mode="min")
trainer(max_epochs=4, callbacks=[torch_top1], plugins=[Subclassed()]).fit(M(), loader(), loader())
calls.append(["torch_io kept", sorted(os.listdir("ckpt3"))])
print(json.dumps(calls))
'''

ACCELERATOR_OBJECTS = MODEL + '''
from lightning.pytorch.accelerators import Accelerator, CPUAccelerator, CUDAAccelerator, MPSAccelerator

seen = {}
for name, accelerator in [("object", CPUAccelerator()), ("string", "cpu")]:
    pl.seed_everything(0)
    model = M()
    run = pl.Trainer(accelerator=accelerator, max_epochs=2, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, enable_checkpointing=False)
    run.fit(model, loader(), loader())
    seen[name] = {
        "weights": [round(v, 6) for v in model.net.weight.flatten().tolist()],
        "step": run.global_step,
        "isinstance": [isinstance(run.accelerator, c) for c in (Accelerator, CPUAccelerator, CUDAAccelerator, MPSAccelerator)],
        "available": [CPUAccelerator.is_available(), MPSAccelerator.is_available()],
    }
print(json.dumps(seen))
'''

PROFILERS = '''
import os, json, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import lightning.pytorch as pl
from lightning.pytorch.profilers import SimpleProfiler, PassThroughProfiler, Profiler, AdvancedProfiler, PyTorchProfiler
class M(pl.LightningModule):
    def __init__(self):
        super().__init__(); self.net = nn.Linear(4, 1)
    def training_step(self, b, i):
        return nn.functional.mse_loss(self.net(b[0]), b[1])
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
dl = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
p = SimpleProfiler(dirpath="prof", filename="perf", extended=True)
pl.Trainer(accelerator="cpu", max_epochs=1, profiler=p, logger=False, enable_progress_bar=False, enable_checkpointing=False).fit(M(), dl)
print(json.dumps([sorted(os.listdir("prof")), isinstance(p, Profiler), isinstance(PassThroughProfiler(), Profiler)]))
'''

ADVANCED = PROFILERS.split("p = SimpleProfiler")[0] + '''
p = AdvancedProfiler(dirpath="adv", filename="perf", line_count_restriction=5, dump_stats=True)
pl.Trainer(accelerator="cpu", max_epochs=1, profiler=p, logger=False, enable_progress_bar=False, enable_checkpointing=False).fit(M(), dl)
files = sorted(os.listdir("adv"))
report = open("adv/fit-perf.txt").read()
by_name = pl.Trainer(accelerator="cpu", max_steps=1, profiler="advanced", logger=False, enable_progress_bar=False,
                     enable_checkpointing=False)
by_name.fit(M(), dl)
print(json.dumps([[f for f in files if not f.endswith(".prof")], "fit-perf-run_training_batch.prof" in files,
                  "Profile stats for: run_training_batch" in report, isinstance(p, Profiler),
                  by_name.global_step]))
'''


def _run(tmp_path, script: str, *runner: str) -> list:
    (tmp_path / "script.py").write_text(script)
    done = subprocess.run([sys.executable, *runner, "script.py"], cwd=tmp_path, env=script_env(None),
                          capture_output=True, text=True, timeout=250)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_library_s_checkpoint_io_saves_loads_and_removes_every_checkpoint_as_in_lightning(tmp_path):
    importorskip("lightning.pytorch")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "ours").mkdir()
    theirs = _run(tmp_path / "theirs", CHECKPOINT_IO)
    ours = _run(tmp_path / "ours", CHECKPOINT_IO, "-m", "trainer.as_lightning")
    assert ours == theirs
    assert ["load", "epoch=3-step=16.ckpt"] in ours and ["remove", "epoch=0-step=4.ckpt"] in ours


def test_torch_checkpoint_io_saves_loads_and_removes_as_lightning_s(tmp_path):
    import torch

    from trainer.lightning.fabric_io import TorchCheckpointIO

    lightning_io = importorskip("lightning.fabric.plugins.io.torch_io").TorchCheckpointIO()
    checkpoint = {"state_dict": {"w": torch.arange(3.0)}, "epoch": 2}
    for io, name in [(TorchCheckpointIO(), "ours"), (lightning_io, "theirs")]:
        path = str(tmp_path / name / "sub" / "a.ckpt")
        io.save_checkpoint(checkpoint, path)  # makes the folder
        loaded = io.load_checkpoint(path)
        assert loaded["epoch"] == 2 and torch.equal(loaded["state_dict"]["w"], checkpoint["state_dict"]["w"])
        with pytest.raises(TypeError, match="storage_options"):
            io.save_checkpoint(checkpoint, path, storage_options={"x": 1})
        io.remove_checkpoint(path)
        io.remove_checkpoint(path)  # gone already: not an error
        with pytest.raises(FileNotFoundError, match="Checkpoint file not found"):
            io.load_checkpoint(path)


def test_a_checkpoint_io_plugin_is_taken_and_other_plugins_are_refused():
    from trainer import Trainer
    from trainer.lightning.fabric_io import TorchCheckpointIO

    io = TorchCheckpointIO()
    assert Trainer(accelerator="cpu", logger=False, plugins=[io]).strategy.checkpoint_io is io
    with pytest.raises(ValueError, match="2 checkpoint I/O plugins"):
        Trainer(accelerator="cpu", logger=False, plugins=[io, TorchCheckpointIO()])
    with pytest.raises(NotImplementedError, match="plugins=.*only a CheckpointIO is taken"):
        Trainer(accelerator="cpu", logger=False, plugins=[io, "bf16-mixed"])


def test_an_accelerator_object_is_its_string_form_as_in_lightning(tmp_path):
    importorskip("lightning.pytorch")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "ours").mkdir()
    theirs = _run(tmp_path / "theirs", ACCELERATOR_OBJECTS)
    ours = _run(tmp_path / "ours", ACCELERATOR_OBJECTS, "-m", "trainer.as_lightning")
    assert ours == theirs
    assert ours["object"] == ours["string"] and ours["object"]["isinstance"] == [True, True, False, False]


def test_an_accelerator_of_a_kind_lockstep_cannot_run_is_refused_naming_what_to_use():
    from trainer import Trainer
    from trainer.lightning.accelerators import Accelerator, CPUAccelerator, MPSAccelerator

    class LibraryAccelerator(Accelerator):
        pass

    class TunedCPU(CPUAccelerator):  # a subclass of a device class keeps its kind
        pass

    assert Trainer(accelerator=TunedCPU(), logger=False).strategy.accelerator.kind == "cpu"
    for refused in (LibraryAccelerator(), MPSAccelerator()):
        with pytest.raises(NotImplementedError, match=rf"accelerator={type(refused).__name__}\(\)\).*use Trainer\(accelerator='cpu'"):
            Trainer(accelerator=refused, logger=False)


def test_lightning_s_profiler_classes_take_lightning_s_arguments_and_write_the_summary_where_lightning_does(tmp_path):
    importorskip("lightning.pytorch")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "ours").mkdir()
    theirs = _run(tmp_path / "theirs", PROFILERS)
    ours = _run(tmp_path / "ours", PROFILERS, "-m", "trainer.as_lightning")
    assert ours == theirs == [["fit-perf.txt"], True, True]
    assert "run_training_batch" in (tmp_path / "ours" / "prof" / "fit-perf.txt").read_text()


def test_lightning_s_advanced_profiler_writes_cprofile_statistics_per_section_as_lightning_does(tmp_path):
    importorskip("lightning.pytorch")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "ours").mkdir()
    theirs = _run(tmp_path / "theirs", ADVANCED)
    ours = _run(tmp_path / "ours", ADVANCED, "-m", "trainer.as_lightning")
    assert ours == theirs == [["fit-perf.txt"], True, True, True, 1]
