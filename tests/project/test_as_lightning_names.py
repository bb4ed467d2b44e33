"""Issue 41 build item 1: names that libraries built on Lightning import, each importable under
``python -m trainer.as_lightning`` and of the kind Lightning's is (a class, a function, a module),
resolving to Lockstep's objects. Both sides run in their own interpreter: the same script prints each
name's kind and module under the runner and under the installed Lightning."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.distributed import script_env
from tests.helpers.optional import importorskip
from trainer.lightning.loops import _EvaluationLoop
from trainer.lightning.unsupported import NotProvidedError

pytestmark = [pytest.mark.launches, pytest.mark.timeout(240)]

# (module, name or "" for the module itself); an attribute path is "a.b.c" with name "@a.b.c"
NAMES = [
    ("lightning.pytorch.core.mixins", "HyperparametersMixin"),
    ("pytorch_lightning.core.saving", "get_filesystem"),
    ("pytorch_lightning.utilities.warnings", "PossibleUserWarning"),
    ("lightning.pytorch.cli", "LRSchedulerCallable"),
    ("lightning.pytorch.cli", "OptimizerCallable"),
    ("lightning.pytorch.trainer.connectors.accelerator_connector", "_AcceleratorConnector"),
    ("pytorch_lightning", "@callbacks.early_stopping.EarlyStopping"),
    ("lightning_fabric.plugins.io.torch_io", "TorchCheckpointIO"),
    ("lightning_fabric.plugins.io.checkpoint_io", "CheckpointIO"),
    ("lightning.pytorch.plugins.io", "CheckpointIO"),
    ("lightning.pytorch.plugins", "TorchCheckpointIO"),
    ("lightning.pytorch.accelerators", "Accelerator"),
    ("lightning.pytorch.accelerators", "CPUAccelerator"),
    ("pytorch_lightning.accelerators", "CUDAAccelerator"),
    ("lightning.pytorch.accelerators", "MPSAccelerator"),
    ("lightning.fabric.utilities.cloud_io", ""),
    ("lightning.fabric.utilities.cloud_io", "get_filesystem"),
    ("lightning.fabric.utilities.cloud_io", "_load"),
    ("lightning.fabric.utilities.cloud_io", "_atomic_save"),
    ("lightning.pytorch.loops", "_EvaluationLoop"),
    ("pytorch_lightning", "@loops._FitLoop"),
]

PROBE = '''
import importlib, inspect, json, sys, types

def kind(obj):
    if isinstance(obj, types.ModuleType):
        return "module"
    if isinstance(obj, type):
        return "class"
    return "function" if inspect.isroutine(obj) else "other"

seen = {}
for module, name in json.loads(sys.argv[1]):
    try:
        obj = importlib.import_module(module)
        for part in (name.lstrip("@").split(".") if name else []):
            obj = getattr(obj, part)
        where = getattr(obj, "_lockstep_target", obj).__name__ if kind(obj) == "module" else obj.__module__
        seen[f"{module}:{name}"] = [kind(obj), where or ""]
    except Exception as err:
        seen[f"{module}:{name}"] = ["error", f"{type(err).__name__}: {err}"]
print(json.dumps(seen))
'''


def _kinds(tmp_path, *runner: str) -> dict[str, list[str]]:
    (tmp_path / "probe.py").write_text(PROBE)
    done = subprocess.run([sys.executable, *runner, "probe.py", json.dumps(NAMES)], cwd=tmp_path,
                          env=script_env(None), capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_each_name_libraries_import_resolves_to_lockstep_s_of_lightning_s_kind(tmp_path):
    importorskip("lightning.pytorch")
    ours, theirs = _kinds(tmp_path, "-m", "trainer.as_lightning"), _kinds(tmp_path)
    wrong = {
        name: (ours[name], theirs[name]) for name in ours
        if ours[name][0] != theirs[name][0] or not ours[name][1].startswith(("trainer", "callbacks", "typing"))
    }
    assert not wrong, wrong
    assert all(kind != "error" for kind, _ in theirs.values()), theirs


def test_a_name_lockstep_cannot_run_imports_and_subclasses_but_refuses_an_instance():
    class LibraryLoop(_EvaluationLoop):  # as a library's own evaluation loop does
        def __init__(self):
            pass

    assert issubclass(LibraryLoop, _EvaluationLoop) and not isinstance(object(), _EvaluationLoop)
    with pytest.raises(NotProvidedError, match="LibraryLoop: Lightning's `_EvaluationLoop` .* use the Trainer's hooks"):
        LibraryLoop()
