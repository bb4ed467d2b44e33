"""Issue 41 build item 10: a Lightning class a library subclasses keeps, under ``python -m
trainer.as_lightning``, every Lightning base it has (Lightning's `Logger` is Fabric's `Logger`, its
`CheckpointIO` Fabric's, `ModelCheckpoint` a `Checkpoint`, the bars `ProgressBar`s), and the bases
libraries call cooperatively (``super().on_fit_start(trainer, pl_module=...)``) keep Lightning's method
signatures: parameter names, kinds and defaults (annotations aside).

The same script runs under the installed Lightning and under the runner; the classes are the ones
libraries subclass. Lockstep's classes may have more bases (its loggers are also callbacks).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.distributed import script_env
from tests.helpers.optional import importorskip

pytestmark = [pytest.mark.launches, pytest.mark.timeout(300)]

SCRIPT = 'import importlib, inspect, json\nCLASSES = {\n "pl.loggers.Logger": "lightning.pytorch.loggers:Logger",\n "fabric.loggers.Logger": "lightning.fabric.loggers:Logger",\n "pl.loggers.CSVLogger": "lightning.pytorch.loggers:CSVLogger",\n "fabric.loggers.CSVLogger": "lightning.fabric.loggers:CSVLogger",\n "pl.loggers.TensorBoardLogger": "lightning.pytorch.loggers:TensorBoardLogger",\n "pl.Callback": "lightning.pytorch.callbacks:Callback",\n "pl.callbacks.Checkpoint": "lightning.pytorch.callbacks:Checkpoint",\n "pl.callbacks.ModelCheckpoint": "lightning.pytorch.callbacks:ModelCheckpoint",\n "pl.callbacks.EarlyStopping": "lightning.pytorch.callbacks:EarlyStopping",\n "pl.callbacks.ProgressBar": "lightning.pytorch.callbacks.progress:ProgressBar",\n "pl.callbacks.TQDMProgressBar": "lightning.pytorch.callbacks:TQDMProgressBar",\n "pl.callbacks.RichProgressBar": "lightning.pytorch.callbacks:RichProgressBar",\n "pl.callbacks.ModelSummary": "lightning.pytorch.callbacks:ModelSummary",\n "pl.callbacks.LearningRateMonitor": "lightning.pytorch.callbacks:LearningRateMonitor",\n "pl.plugins.io.CheckpointIO": "lightning.pytorch.plugins.io:CheckpointIO",\n "fabric.plugins.io.CheckpointIO": "lightning.fabric.plugins.io:CheckpointIO",\n "fabric.TorchCheckpointIO": "lightning.fabric.plugins.io.torch_io:TorchCheckpointIO",\n "pl.strategies.Strategy": "lightning.pytorch.strategies:Strategy",\n "pl.strategies.DDPStrategy": "lightning.pytorch.strategies:DDPStrategy",\n "pl.LightningModule": "lightning.pytorch:LightningModule",\n "pl.LightningDataModule": "lightning.pytorch:LightningDataModule",\n "pl.accelerators.Accelerator": "lightning.pytorch.accelerators:Accelerator",\n "pl.profilers.Profiler": "lightning.pytorch.profilers:Profiler",\n}\ncls = {}\nout = {}\nfor k, v in CLASSES.items():\n    m, n = v.split(":")\n    try:\n        cls[k] = getattr(importlib.import_module(m), n)\n    except Exception as e:\n        out[k] = f"ERR {type(e).__name__}: {e}"[:200]\nfor k, c in cls.items():\n    bases = sorted(o for o, oc in cls.items() if o != k and issubclass(c, oc))\n    sigs = {}\n    for name in sorted(dir(c)):\n        if name.startswith("_") and name != "__init__":\n            continue\n        attr = inspect.getattr_static(c, name, None)\n        f = attr.__func__ if isinstance(attr, (staticmethod, classmethod)) else attr\n        if inspect.isfunction(f):\n            try:\n                sigs[name] = ", ".join(\n                    ("*" if p.kind == p.VAR_POSITIONAL else "**" if p.kind == p.VAR_KEYWORD else "")\n                    + p.name + ("" if p.default is p.empty else "=" + (repr(p.default) if isinstance(p.default, (int, float, str, bool, type(None))) else "<obj>"))\n                    + ("/kw" if p.kind == p.KEYWORD_ONLY else "")\n                    for p in inspect.signature(f).parameters.values())\n            except (TypeError, ValueError):\n                sigs[name] = "?"\n    out[k] = {"bases": bases, "sigs": sigs}\nprint(json.dumps(out))\n'

# the bases whose every public method keeps Lightning's signature (a subclass overrides and calls them)
SAME_SIGNATURES = [
    "pl.loggers.Logger", "fabric.loggers.Logger", "pl.Callback", "pl.callbacks.Checkpoint", "pl.plugins.io.CheckpointIO",
    "fabric.plugins.io.CheckpointIO", "fabric.TorchCheckpointIO",
]


def _run(tmp_path, *runner: str) -> dict:
    (tmp_path / "script.py").write_text(SCRIPT)
    done = subprocess.run([sys.executable, *runner, "script.py"], cwd=tmp_path, env=script_env(None),
                          capture_output=True, text=True, timeout=250)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_lightning_s_bases_and_the_base_classes_signatures_are_kept_under_the_runner(tmp_path):
    importorskip("lightning", reason="the differential test reads the installed Lightning")
    theirs = _run(tmp_path)
    ours = _run(tmp_path, "-m", "trainer.as_lightning")
    unimportable = {name: got for name, got in ours.items() if isinstance(got, str) and not isinstance(theirs[name], str)}
    assert not unimportable, unimportable
    missing_bases = {
        name: sorted(set(want["bases"]) - set(ours[name]["bases"]))
        for name, want in theirs.items()
        if set(want["bases"]) - set(ours[name]["bases"])
    }
    assert not missing_bases, missing_bases
    assert "fabric.loggers.Logger" in ours["pl.loggers.CSVLogger"]["bases"]
    differences = [
        f"{name}.{method}: Lightning ({want}) Lockstep ({ours[name]['sigs'].get(method)})"
        for name in SAME_SIGNATURES
        for method, want in theirs[name]["sigs"].items()
        if ours[name]["sigs"].get(method) != want
    ]
    assert not differences, "\n".join(differences)
    # every hook of every class keeps Lightning's parameter names (a subclass's cooperative
    # `super().on_validation_end(trainer, pl_module=pl_module)` binds by name)
    renamed = [
        f"{name}.{method}: Lightning ({want}) Lockstep ({ours[name]['sigs'][method]})"
        for name, got in theirs.items()
        if not isinstance(got, str)
        for method, want in got["sigs"].items()
        if _is_hook(method) and method in ours[name]["sigs"] and not _keeps_names(want, ours[name]["sigs"][method])
    ]
    assert not renamed, "\n".join(renamed)


def _is_hook(method: str) -> bool:
    return method.startswith("on_") or method in ("setup", "teardown")


def _keeps_names(lightning: str, lockstep: str) -> bool:
    """Lockstep's hook names Lightning's named parameters alike (as SCRIPT writes signatures); where
    Lightning takes ``*args`` from some point on, any names are fine after it."""
    def names(signature: str) -> list[str]:
        return [p.split("=")[0].strip() for p in signature.split(",") if p.strip()]

    theirs, ours = names(lightning), names(lockstep)
    starred = next((i for i, n in enumerate(theirs) if n.startswith("*")), None)
    return ours[:starred] == theirs[:starred] if starred is not None else ours == theirs


AFTER_SAVE = 'import json, torch\nfrom torch import nn\nfrom torch.utils.data import DataLoader, TensorDataset\nimport lightning.pytorch as pl\nfrom lightning.pytorch.callbacks import ModelCheckpoint\n\nclass Rec(pl.loggers.CSVLogger):\n    calls = []\n    def after_save_checkpoint(self, checkpoint_callback):\n        Rec.calls.append(type(checkpoint_callback).__name__)\n        super().after_save_checkpoint(checkpoint_callback)\n\nclass M(pl.LightningModule):\n    def __init__(self):\n        super().__init__(); self.net = nn.Linear(2, 1)\n    def training_step(self, b, i):\n        return nn.functional.mse_loss(self.net(b[0]), b[1])\n    def configure_optimizers(self):\n        return torch.optim.SGD(self.parameters(), lr=0.1)\ndl = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)\npl.Trainer(accelerator="cpu", max_epochs=2, logger=Rec("logs"), enable_progress_bar=False, enable_model_summary=False,\n           callbacks=[ModelCheckpoint(dirpath="ck", save_top_k=-1, save_last=True)]).fit(M(), dl)\nprint(json.dumps(len(Rec.calls)))\n'


def test_a_logger_s_after_save_checkpoint_is_called_after_each_file_written_as_in_lightning(tmp_path):
    importorskip("lightning", reason="the differential test runs the installed Lightning")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "ours").mkdir()
    for side in ("theirs", "ours"):
        (tmp_path / side / "script.py").write_text(AFTER_SAVE)
    theirs = _run_script(tmp_path / "theirs")
    ours = _run_script(tmp_path / "ours", "-m", "trainer.as_lightning")
    assert ours == theirs == 4  # 2 epochs: each top-k file and each last.ckpt copy


def _run_script(path, *runner: str):
    done = subprocess.run([sys.executable, *runner, "script.py"], cwd=path, env=script_env(None),
                          capture_output=True, text=True, timeout=250)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
