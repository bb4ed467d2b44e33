"""The contracts floor: what callbacks may use, held against the code (tests/project/test_types.py holds
the real classes against its protocols with mypy: tests/project/conformance_check.py)."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from callbacks import Callback
from trainer import Trainer

from tests.helpers.source_imports import all_imports

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def trainer():
    return Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False)


def _imports(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def _floor_imports_above(root: Path) -> list[str]:
    """What the floor (``root/trainer/contracts``) imports besides the standard library, torch and
    itself, at run time or under ``if TYPE_CHECKING:``, as ``file: module``."""
    # fsspec: the `remote` extra, imported by the storage layer only when a URL is used
    # ray: the `ray` extra, imported only where Ray is imported already (trainer/contracts/ray_worker.py)
    allowed = {"torch", "__future__", "fsspec", "ray", *sys.stdlib_module_names}
    return sorted(
        f"{path.name}: {module}"
        for path in (root / "trainer" / "contracts").glob("*.py")
        for module in all_imports(path)
        if module.split(".")[0] not in allowed and not module.startswith("trainer.contracts")
    )


def test_the_floor_imports_only_the_standard_library_and_torch():
    # annotations included: the floor's protocols name the trainer's parts by protocols of the
    # floor (trainer/contracts/internals.py), so the type checker's graph has the same floor
    assert _floor_imports_above(REPO) == []


def test_the_floor_check_finds_an_annotation_import(tmp_path):
    (tmp_path / "trainer" / "contracts").mkdir(parents=True)
    (tmp_path / "trainer" / "contracts" / "p.py").write_text(
        "from typing import TYPE_CHECKING\nimport torch\nfrom trainer.contracts import errors\n"
        "if TYPE_CHECKING:\n    from trainer.loops.fit_loop import FitLoop\n"
    )
    assert _floor_imports_above(tmp_path) == ["p.py: trainer.loops.fit_loop", "p.py: trainer.loops.fit_loop.FitLoop"]


@pytest.mark.launches
def test_importing_the_floor_does_not_import_the_trainer():
    code = (
        "import sys, trainer.contracts.protocols, trainer.contracts.storage, callbacks; "
        "print('trainer.trainer' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False"


def test_no_part_below_the_trainer_imports_it():
    # annotations included: a part that needs the Trainer annotates with a protocol of the floor;
    # only what stands above the Trainer (the package's names, the CLI, the tuner) imports it
    importers = sorted(
        path.relative_to(REPO).as_posix()
        for path in REPO.glob("trainer/**/*.py")
        if {"trainer.trainer"} & _imports(path)
    )
    assert importers == ["trainer/__init__.py", "trainer/cli.py", "trainer/tuner.py"]


def _definitions(name_pattern: str) -> list[str]:
    pattern = re.compile(name_pattern)
    return sorted(
        f"{path.relative_to(REPO).as_posix()}:{node.name}"
        for path in [*REPO.glob("trainer/**/*.py"), *REPO.glob("callbacks/**/*.py")]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and pattern.fullmatch(node.name)
        # an ``@overload`` signature types the one definition (by its ``allow_none``), it is not another
        and not any(ast.unparse(d).split(".")[-1] == "overload" for d in node.decorator_list)
    )


def test_one_argument_check_module_and_one_rank_detection():
    assert _definitions(r"_?check_(bool|int|number|path|str|real|positive|non_negative)") == [
        f"trainer/contracts/arguments.py:check_{kind}" for kind in ("bool", "int", "number", "path", "str")
    ]
    assert _definitions(r"_?(env|detect|current)_global_rank") == [
        "trainer/contracts/rank.py:current_global_rank",
        "trainer/contracts/rank.py:detect_global_rank",
    ]


def _loop_writes(path: Path) -> list[str]:
    return [
        ast.unparse(target)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if "fit_loop" in ast.unparse(target) or "progress." in ast.unparse(target)
    ]


@pytest.mark.parametrize("name", ["connector.py", "resume.py"])
def test_the_checkpoint_connector_writes_no_field_of_the_loop(name):
    # the fit loop serializes itself (FitLoop.state_dict / load_state_dict)
    assert _loop_writes(REPO / "trainer" / "checkpointing" / name) == []


def test_the_loop_write_check_finds_a_write(tmp_path):
    sample = tmp_path / "c.py"
    sample.write_text("def f(trainer):\n    trainer.fit_loop.lr_scaled = True\n    trainer.fit_loop.progress.batch_idx += 1\n")
    assert _loop_writes(sample) == ["trainer.fit_loop.lr_scaled", "trainer.fit_loop.progress.batch_idx"]


def test_the_checkpoint_connector_is_short():
    # what a checkpoint holds and the order of restoring; the resume position lives in resume.py
    lines = (REPO / "trainer" / "checkpointing" / "connector.py").read_text(encoding="utf-8").count("\n")
    assert lines <= 150, lines


def _writes_of(attribute: str, paths: list[Path], root: Path = REPO) -> list[str]:
    """Every assignment to ``<anything>.<attribute>`` in ``paths``, as ``file: target``."""
    return sorted(
        f"{path.relative_to(root).as_posix()}: {ast.unparse(target)}"
        for path in paths
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and target.attr == attribute
    )


def _package_files() -> list[Path]:
    return [*REPO.glob("trainer/**/*.py"), *REPO.glob("callbacks/**/*.py")]


def _keyword_uses(name: str, paths: list[Path], root: Path = REPO) -> list[str]:
    """Every ``replace(..., name=...)`` or ``FitProgress(name=...)`` (``cls(...)``) in ``paths``, as ``file: callee``."""
    return sorted(
        f"{path.relative_to(root).as_posix()}: {ast.unparse(node.func)}"
        for path in paths
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and any(k.arg == name for k in node.keywords)
        and ast.unparse(node.func).split(".")[-1] in ("replace", "FitProgress", "cls")
    )


def test_one_place_counts_the_global_step():
    # FitProgress owns the step, a frozen value: stepped() returns the next one (the only
    # `global_step + 1`), from_state_dict() restores (the only keyword use); nothing assigns it
    assert _writes_of("global_step", _package_files()) == []
    assert _keyword_uses("global_step", _package_files()) == ["trainer/contracts/progress.py: cls"]
    increments = sorted(
        f"{path.relative_to(REPO).as_posix()}"
        for path in _package_files()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
        and isinstance(node.left, ast.Attribute) and node.left.attr == "global_step"
    )
    assert increments == ["trainer/contracts/progress.py"]


def _method_calls(method: str, paths: list[Path], root: Path = REPO) -> list[str]:
    """Every call of ``<anything>.<method>(...)`` in ``paths``, as ``file: callee``."""
    return sorted(
        f"{path.relative_to(root).as_posix()}: {ast.unparse(node.func)}"
        for path in paths
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method
    )


def test_one_place_gives_the_sampler_its_accumulation_and_its_start():
    # A reaches the GlobalBatchSampler from one read of the Trainer's value (FitLoop._take_accumulation),
    # and a resumed epoch's samples_done from the resume plan, once
    trainer_files = sorted(REPO.glob("trainer/**/*.py"))  # (a progress bar has a start_at of its own)
    assert _method_calls("set_accumulation", trainer_files) == ["trainer/loops/fit_loop.py: sampler.set_accumulation"]
    assert _method_calls("start_at", trainer_files) == ["trainer/loops/fit_loop.py: sampler.start_at"]


def test_the_write_check_finds_a_step_counted_elsewhere(tmp_path):
    sample = tmp_path / "step.py"
    sample.write_text("def f(progress):\n    progress.global_step += 1\n")
    assert _writes_of("global_step", [sample], root=tmp_path) == ["step.py: progress.global_step"]
    sample.write_text("def f(progress):\n    return dataclasses.replace(progress, global_step=0)\n")
    assert _keyword_uses("global_step", [sample], root=tmp_path) == ["step.py: dataclasses.replace"]


_RNG_CALLS = {"getstate", "setstate", "get_state", "set_state", "get_rng_state", "set_rng_state",
              "get_rng_state_all", "set_rng_state_all", "fork_rng"}


def _rng_state_calls(paths: list[Path], root: Path = REPO) -> list[str]:
    """Every call that reads or sets a random state (``random.getstate()``, ``gen.set_state(s)``...)."""
    return sorted({
        f"{path.relative_to(root).as_posix()}: {node.func.attr}"
        for path in paths
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _RNG_CALLS
    })


def test_random_states_are_saved_and_restored_in_one_module():
    files = {line.split(":")[0] for line in _rng_state_calls(_package_files())}
    assert files == {"trainer/rng.py"}


def test_the_rng_check_finds_a_state_restored_elsewhere(tmp_path):
    sample = tmp_path / "r.py"
    sample.write_text("import torch\ndef f(s):\n    torch.cuda.set_rng_state(s, 0)\n")
    assert _rng_state_calls([sample], root=tmp_path) == ["r.py: set_rng_state"]


def _strategy_classes(paths: list[Path], root: Path = REPO) -> list[str]:
    """Every class deriving from a ``...Strategy`` base, as ``file: class``."""
    return sorted(
        f"{path.relative_to(root).as_posix()}: {node.name}"
        for path in paths
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(base).split(".")[-1].endswith("Strategy") for base in node.bases)
    )


def test_every_strategy_lives_in_the_strategies_folder():
    found = _strategy_classes(_package_files())
    assert "trainer/strategies/process_group.py: ProcessGroupStrategy" in found
    assert [f for f in found if not f.startswith("trainer/strategies/")] == []


def _isinstance_of(class_name: str, paths: list[Path], root: Path = REPO) -> list[str]:
    """Every ``isinstance(x, class_name)`` and import of ``class_name``, as ``file: what``."""
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance" and class_name in ast.unparse(node.args[1]):
                found.add(f"{path.relative_to(root).as_posix()}: isinstance")
            elif isinstance(node, ast.ImportFrom) and any(a.name == class_name for a in node.names):
                found.add(f"{path.relative_to(root).as_posix()}: import")
    return sorted(found)


def test_the_loops_and_strategies_know_loaders_by_the_loader_protocol():
    from trainer.contracts.loader import ShardingLoader
    from trainer.data.dali import DALILoader  # importable without DALI: it loads DALI on first use

    assert issubclass(DALILoader, ShardingLoader)
    others = [p for p in _package_files() if p.relative_to(REPO).as_posix() != "trainer/data/dali.py"]
    assert _isinstance_of("DALILoader", others) == []


def test_the_loader_check_finds_a_class_test(tmp_path):
    sample = tmp_path / "s.py"
    sample.write_text("from trainer.data.dali import DALILoader\ndef f(x):\n    return isinstance(x, (DALILoader, list))\n")
    assert _isinstance_of("DALILoader", [sample], root=tmp_path) == ["s.py: import", "s.py: isinstance"]


def test_a_loader_of_the_protocol_is_asked_for_its_shard(trainer):
    class Shards:
        def __init__(self, place=None):
            self.place = place

        def sharded(self, shard_id, num_shards, training):
            return Shards((shard_id, num_shards, training))

        def state_dict(self):
            return {"place": self.place}

        def load_state_dict(self, state):
            self.place = state["place"]

        def __iter__(self):
            return iter(())

    assert trainer.strategy.process_dataloader(Shards(), "fit").place == (0, 1, True)
    assert trainer.strategy.process_dataloader(Shards(), "validate").place == (0, 1, False)


def _folder_pairs(root: Path) -> list[tuple[str, str]]:
    """The folders of ``root/trainer`` (and ``callbacks/``) that import each other, at run time or
    under ``if TYPE_CHECKING:``."""
    def folder(module: str) -> str | None:
        parts = module.split(".")
        if parts[0] == "callbacks":
            return "callbacks"
        if parts[0] == "trainer" and len(parts) > 1 and (root / "trainer" / parts[1]).is_dir():
            return f"trainer/{parts[1]}"
        return None

    edges = set()
    for path in [*root.glob("trainer/*/**/*.py"), *root.glob("callbacks/**/*.py")]:
        source = folder(".".join(path.relative_to(root).with_suffix("").parts))
        for module in all_imports(path):
            target = folder(module)
            if source and target and target != source:
                edges.add((source, target))
    return sorted((a, b) for a, b in edges if a < b and (b, a) in edges)


def test_at_most_two_folder_pairs_import_each_other():
    # annotation imports included (docs/architecture.md lists the two pairs with their reasons)
    pairs = _folder_pairs(REPO)
    assert len(pairs) <= 2, pairs


def test_the_pair_check_finds_two_folders_importing_each_other(tmp_path):
    for folder, target in (("strategies", "distributed"), ("distributed", "strategies"), ("data", "strategies")):
        (tmp_path / "trainer" / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / "trainer" / folder / "m.py").write_text(
            f"from typing import TYPE_CHECKING\nfrom trainer.{target}.m import x\nif TYPE_CHECKING:\n    import trainer.loops\n"
        )
    (tmp_path / "trainer" / "loops").mkdir()
    (tmp_path / "trainer" / "loops" / "m.py").write_text("import trainer.data.m\n")
    # data -> loops only under TYPE_CHECKING: an annotation import counts
    assert _folder_pairs(tmp_path) == [("trainer/data", "trainer/loops"), ("trainer/distributed", "trainer/strategies")]


def _module_graph(root: Path) -> dict[str, set[str]]:
    """Each module of ``root/trainer`` and ``root/callbacks`` -> the modules of both it imports, at run
    time or under ``if TYPE_CHECKING:`` (``from package import module``: to the package and the module)."""
    paths = {}
    for path in [*root.glob("trainer/**/*.py"), *root.glob("callbacks/**/*.py")]:
        parts = list(path.relative_to(root).with_suffix("").parts)
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return {name: {m for m in all_imports(path) if m in paths} - {name} for name, path in paths.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in graph.get(node, ()):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_circle_with_annotation_imports_counted():
    # the type checker's graph: a part annotates with a floor protocol, never with a class above it
    assert _circles(_module_graph(REPO)) == []


def test_the_circle_check_finds_a_circle_through_an_annotation_import(tmp_path):
    (tmp_path / "trainer" / "loops").mkdir(parents=True)
    (tmp_path / "trainer" / "loops" / "a.py").write_text("from trainer.loops import b\n")
    (tmp_path / "trainer" / "loops" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from trainer.contracts.p import P\n"
    )
    (tmp_path / "trainer" / "contracts").mkdir()
    (tmp_path / "trainer" / "contracts" / "p.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from trainer.loops.a import A\n"
    )
    (tmp_path / "trainer" / "contracts" / "q.py").write_text("import trainer.loops.a\n")
    assert _circles(_module_graph(tmp_path)) == [["trainer.contracts.p", "trainer.loops.a", "trainer.loops.b"]]


def _string_constants(path: Path) -> set[str]:
    return {
        node.value
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_the_connector_walks_the_registry_of_stateful_objects(trainer):
    from trainer.checkpointing.stateful import stateful_objects

    keys = set(stateful_objects(trainer))
    assert keys == {"callbacks", "optimizer_states", "lr_schedulers", "precision"}
    # the connector names none of their keys: it saves and restores them by walking the registry
    assert keys & _string_constants(REPO / "trainer" / "checkpointing" / "connector.py") == set()


def test_a_checkpoint_holds_each_registered_state_and_gives_it_back(tmp_path):
    import torch

    from tests.helpers.models import QUIET, Regression, loader, regression_data
    from trainer.checkpointing.stateful import stateful_objects

    class Counter(Callback):
        def __init__(self):
            self.seen = 0

        def on_train_batch_end(self, *args):
            self.seen += 1

        def state_dict(self):
            return {"seen": self.seen}

        def load_state_dict(self, state):
            self.seen = state["seen"]

    t = Trainer(accelerator="cpu", max_steps=3, callbacks=[Counter()], **QUIET)
    t.fit(Regression(), loader(regression_data(), batch_size=4))
    t.save_checkpoint(tmp_path / "c.ckpt")
    saved = torch.load(tmp_path / "c.ckpt", weights_only=True)
    assert set(stateful_objects(t)) <= set(saved)
    assert {"seen": 3} in saved["callbacks"].values()
    assert len(saved["optimizer_states"]) == 1 and saved["optimizer_states"][0]["state"]
    resumed = Trainer(accelerator="cpu", max_steps=4, callbacks=[Counter()], **QUIET)
    resumed.fit(Regression(), loader(regression_data(), batch_size=4), ckpt_path=tmp_path / "c.ckpt")
    (counter,) = [cb for cb in resumed.callbacks if isinstance(cb, Counter)]
    assert counter.seen == 4  # 3 restored, one more batch trained
