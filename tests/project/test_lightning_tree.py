"""Issue 41 build item 1: Lightning's public module tree, whole, under ``python -m trainer.as_lightning``.

The index the runner mirrors (trainer/lightning/tree_index.json) must be the installed Lightning's tree
(`tests.project.lightning_tree` walks it with ``pkgutil.walk_packages``), so a module or name
Lightning adds fails here until the index is regenerated; and every module of it imports under the
runner, as ``lightning.pytorch.*``, ``pytorch_lightning.*``, ``lightning.fabric.*`` and
``lightning_fabric.*``, with every public name resolving to an object of Lightning's kind.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.distributed import script_env
from tests.helpers.optional import importorskip
from trainer.lightning import alias, tree
from trainer.lightning.tree import TREE
from trainer.lightning.unsupported import NotProvidedError

pytestmark = pytest.mark.timeout(300)

_PREFIXES = {"pytorch": ("lightning.pytorch", "pytorch_lightning"), "fabric": ("lightning.fabric", "lightning_fabric")}


def _module_names(key: str) -> list[str]:
    family, _, rest = key.partition(".")
    return [prefix + (f".{rest}" if rest else "") for prefix in _PREFIXES[family]]


def _run(args: list[str]) -> dict:
    done = subprocess.run([sys.executable, *args], env=script_env(None), capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _kinds(names: dict[str, str]) -> dict[str, str]:
    # where lightning_utilities keeps a name depends on its version, not Lightning's: the tree falls
    # back to a stand-in where the recorded place is gone
    return {n: "from" if kind.startswith("from:") else kind for n, kind in names.items()}


@pytest.mark.launches
def test_the_index_is_the_installed_lightning_s_tree():
    importorskip("lightning", reason="needs `lightning` (the dev extra)")
    walked = _run(["-m", "tests.project.lightning_tree"])
    assert not walked["failed"], walked["failed"]
    expected = {name: _kinds(names) for key, names in TREE.items() for name in _module_names(key)}
    missing = {m: names for m, names in walked["modules"].items() if expected.get(m) != _kinds(names)}
    assert not missing, f"regenerate: python -m tests.project.lightning_tree --write ({missing})"
    assert set(expected) == set(walked["modules"])


_KINDS = {"class": "class", "function": "function", "logger": "other"}


@pytest.mark.launches
def test_every_module_and_public_name_of_the_tree_resolves_under_the_runner(tmp_path):
    references = [f"{module}:{name}" for key, names in TREE.items() for module in _module_names(key)
                  for name in ["", *names]]
    (tmp_path / "references.json").write_text(json.dumps(references))
    seen = _run(["-m", "trainer.as_lightning", "-m", "tests.ecosystem.probe", str(tmp_path / "references.json")])
    unresolved = {r: kind for r, kind in seen.items() if kind.startswith("error")}
    assert not unresolved, f"{len(unresolved)} of {len(references)} do not resolve: {dict(list(unresolved.items())[:20])}"
    wrong_kind = {}
    for reference, kind in seen.items():
        module, _, name = reference.partition(":")
        lightning_kind = TREE[tree.index_key(module) or ""].get(name, "module") if name else "module"
        want = "class" if lightning_kind.startswith("exception:") else _KINDS.get(lightning_kind, lightning_kind)
        if want in ("class", "function", "module") and kind != want:
            wrong_kind[reference] = (kind, lightning_kind)
    assert not wrong_kind, wrong_kind


def test_a_name_lockstep_has_elsewhere_is_lockstep_s_object_and_one_it_lacks_one_stand_in():
    import callbacks
    import trainer

    def name(module: str, attr: str):
        return tree.lightning_name(module, attr, alias._folded)

    # Lightning imports rank_zero_warn into early_stopping; Lockstep's is in trainer.utilities
    assert name("lightning.pytorch.callbacks.early_stopping", "rank_zero_warn") is trainer.utilities.rank_zero_warn
    assert name("lightning_fabric.utilities.rank_zero", "rank_zero_only") is trainer.utilities.rank_zero_only
    assert name("pytorch_lightning.callbacks.pruning", "ModelPruning") is name("lightning.pytorch.callbacks", "ModelPruning")
    assert name("lightning.pytorch.callbacks.model_checkpoint", "ModelCheckpoint") is callbacks.ModelCheckpoint
    with pytest.raises(AttributeError):
        name("lightning.pytorch.callbacks", "NoSuchCallback")  # not Lightning's: not made up


def test_a_stand_in_imports_subclasses_and_refuses_use_naming_what_to_use():
    def name(module: str, attr: str):
        return tree.lightning_name(module, attr, alias._folded)

    servable = name("lightning.pytorch.serve", "ServableModule")

    class LibraryServable(servable):  # a library's subclass, as Lightning's docs write one
        pass

    assert not isinstance(object(), servable)
    with pytest.raises(NotProvidedError, match=r"LibraryServable: Lightning's `ServableModule` .* use export with"):
        LibraryServable()
    with pytest.raises(NotProvidedError, match=r"`find_usable_cuda_devices` .* use Trainer\(devices=N\)"):
        name("lightning.fabric.accelerators", "find_usable_cuda_devices")(2)
    registry = name("lightning.fabric.connector", "STRATEGY_REGISTRY")  # Fabric's: Lockstep has no Fabric
    with pytest.raises(NotProvidedError, match="STRATEGY_REGISTRY"):
        list(registry)
    assert not hasattr(registry, "__wrapped__")  # introspection still answers as for a plain object
    error = name("lightning.pytorch.utilities.exceptions", "MisconfigurationException")
    assert issubclass(error, Exception)


@pytest.mark.launches
def test_modules_lockstep_has_no_counterpart_of_import_and_their_names_are_stand_ins(tmp_path):
    script = textwrap.dedent('''
        import lightning.pytorch.serve.servable_module_validator as validator
        from pytorch_lightning.overrides.distributed import UnrepeatedDistributedSampler
        from lightning.pytorch.callbacks.early_stopping import EarlyStopping, log
        from lightning_fabric.utilities.warnings import PossibleUserWarning
        import trainer
        assert log.name == "lightning.pytorch.callbacks.early_stopping"
        assert EarlyStopping is trainer.callbacks.EarlyStopping
        assert issubclass(PossibleUserWarning, UserWarning)
        try:
            validator.ServableModuleValidator()
        except ImportError as err:
            assert "ServableModuleValidator" in str(err) and "use " in str(err), err
        else:
            raise AssertionError("a stand-in made an instance")
        print("{}")
    ''')
    (tmp_path / "script.py").write_text(script)
    _run(["-m", "trainer.as_lightning", str(tmp_path / "script.py")])


def test_lightning_s_private_trainer_connectors_libraries_read_name_what_to_use():
    import trainer as lockstep
    from trainer.lightning.private_attributes import NOT_PROVIDED_PRIVATE_TRAINER_ATTRIBUTES
    from trainer.lightning.unsupported import NotProvidedAttributeError

    pl = importorskip("lightning.pytorch", reason="needs `lightning` (the dev extra)")
    quiet = {"accelerator": "cpu", "logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    theirs, ours = pl.Trainer(**quiet), lockstep.Trainer(**quiet)
    for name, alternative in NOT_PROVIDED_PRIVATE_TRAINER_ATTRIBUTES.items():
        assert hasattr(theirs, name), f"{name}: not Lightning's"
        with pytest.raises(NotProvidedAttributeError, match=rf"trainer\.{name}: .* use {re.escape(alternative)}"):
            getattr(ours, name)
        assert not hasattr(ours, name)  # hasattr / getattr(..., None) keep working for libraries' checks


def test_the_strategy_s_optimizers_are_the_trainer_s_as_lightning_s():
    import torch
    from torch import nn

    import trainer as lockstep

    class Module(lockstep.TrainModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4, 2)), batch_size=2)
    t = lockstep.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    assert t.strategy.optimizers == []
    t.fit(Module(), data)
    assert len(t.strategy.optimizers) == 1 and t.strategy.optimizers[0] is t.optimizers[0]
