"""The machinery of ``python -m trainer.as_lightning SCRIPT [ARGS]``: Lightning's module names as
aliases of Lockstep's. Importing this module changes nothing; `install` (which importing
`trainer.as_lightning` calls) does.

``lightning``, ``lightning.pytorch`` and ``pytorch_lightning`` (and every submodule under them)
resolve to Lockstep's modules, for the script and for every library it imports, so a third-party
callback that subclasses ``lightning.pytorch.Callback`` subclasses Lockstep's `Callback`.
Lightning itself need not be installed; where it is, it is not imported, in this process nor in the
processes it starts (workers, ``ddp_spawn`` ranks, multiprocessing children, DataLoader workers).

``lightning.pytorch.__version__`` (and ``lightning.__version__``, ``pytorch_lightning.__version__``)
is `LIGHTNING_API_VERSION`, the Lightning release whose API Lockstep implements and the test suite
compares against. Every module and name of Lightning's tree, ``lightning.fabric`` / ``lightning_fabric``
included, imports (`trainer.lightning.tree`); a name Lightning has and Lockstep lacks is a stand-in
that raises an error naming it and what to use instead when it is used
(`trainer.lightning.unsupported.NOT_PROVIDED_NAMES`). Of Fabric, the type names of
``lightning.fabric.utilities.types`` (`trainer.lightning.fabric_types`) and its checkpoint I/O names
(`trainer.lightning.fabric_io`) are Lockstep's own.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import runpy
import sys
import types
from typing import Any, Callable, Sequence

from trainer.lightning import tree
from trainer.lightning.unsupported import NOT_PROVIDED_NAMES, NotProvidedError
from trainer.strategies.strategy import LIGHTNING_RULES

LIGHTNING_API_VERSION = "2.6.6"

# the names that alias Lockstep's `trainer` package, as Lightning's own packages alias each other
_ROOTS = ("lightning.pytorch", "pytorch_lightning", "lightning")
_FABRIC = ("lightning.fabric", "lightning_fabric")
# the Fabric modules provided (the packages above them import; any other Fabric name is not provided)
_FABRIC_PROVIDED = {
    "utilities.types": "trainer.lightning.fabric_types",
    "utilities.cloud_io": "trainer.lightning.fabric_io",
    "plugins.io.torch_io": "trainer.lightning.fabric_io",
    "plugins.io": "trainer.lightning.fabric_io",
    "plugins.io.checkpoint_io": "trainer.lightning.fabric_io",
    "plugins": "trainer.lightning.plugins",  # CheckpointIO, TorchCheckpointIO, Precision (a name to subclass)
    "plugins.precision": "trainer.lightning.plugins",
    # Lightning's loggers are Fabric's (`issubclass(pl.loggers.Logger, fabric.loggers.Logger)`): the same classes here
    "loggers": "trainer.loggers",
}
# lightning.pytorch's submodules that Lockstep provides, and the Lockstep module of each
_SUBMODULES = {
    "callbacks": "trainer.callbacks",
    "loggers": "trainer.loggers",
    "strategies": "trainer.lightning.strategies",  # trainer.strategies' names and DeepSpeedStrategy
    "utilities": "trainer.utilities",
    "cli": "trainer.cli",
    "tuner": "trainer.tuner",
    "core": "trainer.core",
    "trainer": "trainer.trainer",
    "accelerators": "trainer.lightning.accelerators",  # Lightning's classes (the core's package has none)
    "demos": "trainer.demos",
    "loops": "trainer.lightning.loops",
    "plugins": "trainer.lightning.plugins",
    "profilers": "trainer.lightning.profilers",
}
# deeper modules of Lightning's whose names are not in their package's namespace module
_DEEPER = {
    "trainer.states": "trainer.stage",
    "trainer.connectors.accelerator_connector": "trainer.lightning.accelerator_connector",
    "plugins.environments": "trainer.lightning.environments",
}
# Lightning's packages below the first level: only in these can a name three levels down be a module
# (`utilities.parsing.get_init_args` is a function; tests/project/test_as_lightning.py checks the list)
SUBPACKAGES = frozenset({
    "callbacks.progress", "core.mixins", "loops.optimization", "plugins.environments", "plugins.io",
    "plugins.precision", "strategies.launchers", "trainer.connectors", "trainer.connectors.logger_connector",
    "utilities.migration", "utilities.model_summary", "utilities.testing",
})
# those whose modules Lockstep mirrors one for one (``demos.boring_classes`` -> ``trainer.demos.boring_classes``)
_MIRRORED = ("demos",)
# packages named ``lightning``, ``pytorch_lightning`` and ``lightning_fabric`` that `install` puts first on
# the path of every process this one starts (`replace_in_child`)
# the Lockstep module of Lightning's modules that have no counterpart (`trainer.lightning.tree`)
_LIGHTNING_ONLY = "trainer.lightning.lightning_only"
CHILD_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_child_path")


def lockstep_module_for(name: str) -> str | None:
    """The Lockstep module that Lightning's module ``name`` resolves to; None if not an aliased name.

    A deeper module (``lightning.pytorch.callbacks.model_checkpoint``) resolves to its Lightning
    package's namespace module (``trainer.callbacks``), which exports the same names; under a
    mirrored package (``demos``) to Lockstep's module of the same name (``trainer.demos.boring_classes``).
    """
    root = next((r for r in _ROOTS if name == r or name.startswith(r + ".")), None)
    if root is None:
        return None
    rest = name[len(root) + 1:].split(".") if name != root else []
    if not rest:
        return "trainer"
    if ".".join(rest) in _DEEPER:
        return _DEEPER[".".join(rest)]
    if len(rest) > 1 and not _may_be_module(rest):
        return None  # `from lightning.pytorch.callbacks import ModelPruning` looks for a module of that name first
    if rest[0] in _MIRRORED:
        return ".".join(["trainer", *rest])
    if rest[0] not in _SUBMODULES and tree.is_tree_module(name):
        return _LIGHTNING_ONLY  # serve, overrides, _graveyard: their names are the tree's stand-ins
    return _SUBMODULES.get(rest[0], "")  # "": a submodule of Lightning's that Lockstep lacks


def _may_be_module(rest: list[str]) -> bool:
    # Lightning's module names are lower case; its classes and constants are not, and a name it
    # has that Lockstep lacks must reach the namespace module's error, not become a module; nor
    # can a name inside a module (not a package) be one
    full = "lightning.pytorch." + ".".join(rest)
    if tree.is_tree_module(full) or tree.is_tree_module(full.rpartition(".")[0]):
        return tree.is_tree_module(full)  # Lightning's tree says which of its names are modules
    last = rest[-1]
    inside_package = len(rest) == 2 or ".".join(rest[:-1]) in SUBPACKAGES
    return inside_package and last.islower() and f"{rest[0]}.{last}" not in NOT_PROVIDED_NAMES


class _AliasModule(types.ModuleType):
    """Lightning's module ``name``: every attribute read from the Lockstep module it resolves to."""

    def __init__(self, name: str, target: types.ModuleType) -> None:
        super().__init__(name, target.__doc__)
        self.__dict__["_lockstep_target"] = target
        self.__path__: list[str] = []  # a package: deeper imports come back to the finder
        if target.__name__ == "trainer":
            self.__version__ = LIGHTNING_API_VERSION

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr != "__all__":  # `from lightning.pytorch.callbacks import *` reads __all__
            raise AttributeError(attr)
        if self.__name__ == "lightning" and attr in ("pytorch", "fabric", "Fabric"):
            # `import lightning as L; L.pytorch.Trainer`: Lightning's package imports both at once;
            # `L.Fabric` is Fabric's stand-in (`tree`): it imports, and refuses an instance
            if attr == "Fabric":
                return getattr(importlib.import_module("lightning.fabric"), attr)
            return importlib.import_module(f"lightning.{attr}")
        # `pl.callbacks.early_stopping.EarlyStopping`: a Lightning module read as an attribute is its
        # alias (reading on from Lockstep's module would find no `early_stopping`)
        submodule = f"{self.__name__}.{attr}"
        try:
            value = getattr(self.__dict__["_lockstep_target"], attr)
        except AttributeError:
            if tree.is_tree_module(submodule):
                return importlib.import_module(submodule)
            try:  # a public name of Lightning's module here: Lockstep's object elsewhere, or a stand-in
                return tree.lightning_name(self.__name__, attr, _folded)
            except AttributeError:
                if self.__name__.startswith(_FABRIC):
                    raise _fabric_not_provided(submodule) from None
            if not lockstep_module_for(submodule):
                raise
            return importlib.import_module(submodule)
        return importlib.import_module(submodule) if _is_aliased_module(value, submodule) else value

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *dir(self.__dict__["_lockstep_target"])})

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # pickled by name, as a plain module is: Ray's cloudpickle sends a function's globals (``pl``)
        # to its workers by reference only for types.ModuleType itself, not a subclass
        return importlib.import_module, (self.__name__,)


def _is_aliased_module(value: Any, name: str) -> bool:
    return isinstance(value, types.ModuleType) and bool(lockstep_module_for(name))


def _folded(name: str) -> types.ModuleType | None:
    # the Lockstep module a Lightning module's names are read from (`tree.lightning_name` looks there)
    if name.startswith(_FABRIC):
        target: str | None = _FABRIC_PROVIDED.get(_fabric_rest(name))
    else:
        target = lockstep_module_for(name)
    return importlib.import_module(target) if target else None


def _fabric_not_provided(name: str) -> NotProvidedError:
    return NotProvidedError(
        f"{name}: Lightning Fabric is not provided by Lockstep; use {NOT_PROVIDED_NAMES['Fabric']} "
        "(docs/migration.md; Fabric's own modules and names import, as stand-ins where Lockstep has none).",
        name=name,
    )


def _fabric_rest(name: str) -> str:
    root = next(r for r in _FABRIC if name == r or name.startswith(r + "."))
    return name[len(root) + 1:]


def _fabric_module(name: str) -> types.ModuleType:
    # the Fabric modules of Lightning's tree (`tree`): those Lockstep provides read from its module,
    # the others (the packages on the way to them included) hold the tree's names only
    rest = _fabric_rest(name)
    if rest in _FABRIC_PROVIDED:
        return _AliasModule(name, importlib.import_module(_FABRIC_PROVIDED[rest]))
    if tree.is_tree_module(name):
        return _AliasModule(name, importlib.import_module(_LIGHTNING_ONLY))
    raise _fabric_not_provided(name)


class _AliasLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        name = spec.name
        if name.startswith(_FABRIC):
            return _fabric_module(name)
        target = lockstep_module_for(name)
        if not target:
            sub = name.split(".")[2 if name.startswith("lightning.pytorch.") else 1]
            alternative = NOT_PROVIDED_NAMES.get(sub, "what docs/migration.md lists instead")
            raise NotProvidedError(
                f"{name}: Lightning's `{sub}` is not provided by Lockstep; use {alternative} (docs/migration.md).",
                name=name,
            )
        return _AliasModule(name, importlib.import_module(target))

    def exec_module(self, module: types.ModuleType) -> None:
        pass  # the Lockstep module it reads from is already imported


class _AliasFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: Lightning's module names, before the installed Lightning is found."""

    _lockstep_alias = True  # one finder per process, whichever copy of this module installed it

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if lockstep_module_for(fullname) is None and not fullname.startswith(_FABRIC):
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(), is_package=True)


def installed() -> bool:
    """Whether `install` ran in this process (the script runs under ``trainer.as_lightning``)."""
    return any(getattr(finder, "_lockstep_alias", False) for finder in sys.meta_path)


def install() -> None:
    """Make Lightning's module names resolve to Lockstep in this process and the processes it starts
    (idempotent; docs/migration.md, section 1).

    Raises `RuntimeError` if Lightning was imported already: objects made from it would stay Lightning's.
    """
    if installed():
        return
    loaded = sorted(n for n in sys.modules if lockstep_module_for(n) is not None or n.startswith(_FABRIC))
    if loaded:
        raise RuntimeError(
            f"trainer.as_lightning must be imported before Lightning; already imported: {', '.join(loaded[:5])}. "
            "Restart the interpreter (the notebook's kernel) and import trainer.as_lightning first."
        )
    sys.meta_path.insert(0, _AliasFinder())
    _reach_children()


def _reach_children() -> None:
    # A process this one starts imports Lightning before any code of ours runs in it: a torchrun or
    # self-launched worker runs the script itself, a multiprocessing spawn or forkserver child (a
    # DataLoader worker too) re-imports the script as its ``__main__`` before unpickling its target.
    # What each reads first is the path: PYTHONPATH for a new interpreter, this process's sys.path
    # for a multiprocessing child (its preparation data). On both, CHILD_PATH's ``lightning`` comes
    # before the installed one and installs the alias. Fork children inherit the finder itself.
    if CHILD_PATH not in sys.path:
        sys.path.insert(0, CHILD_PATH)
    os.environ[LIGHTNING_RULES] = "1"  # Lightning's readings where Lockstep's differ, in every rank
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if CHILD_PATH not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([CHILD_PATH, *paths])


def replace_in_child(name: str) -> None:
    """Called by CHILD_PATH's package ``name`` as it is imported: install the alias and put Lockstep's
    module for ``name`` in its place (the import statement returns what ``sys.modules`` holds then)."""
    del sys.modules[name]  # not Lightning imported already, for `install`
    install()
    sys.modules[name] = importlib.import_module(name)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m trainer.as_lightning SCRIPT [ARGS]`` (or ``-m MODULE [ARGS]``, or ``--entry NAME [ARGS]``
    for an installed console script): run it as ``__main__``."""
    import os

    args = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: python -m trainer.as_lightning SCRIPT [ARGS] | -m MODULE [ARGS] | --entry NAME [ARGS]"
    if args and args[0] in ("-h", "--help"):
        print(f"{usage}\n\nRun a Lightning script, module or console script unchanged, on Lockstep (docs/migration.md).")
        raise SystemExit(0)
    if not args or args in (["-m"], ["--entry"]):  # a usage error: one line on stderr, exit status 2 (as python's own)
        sys.stderr.write(usage + "\n")
        raise SystemExit(2)
    if args[0] == "--entry":
        entry = _console_script(args[1])
        install()
        sys.argv = [args[1], *args[2:]]
        raise SystemExit(entry())  # as the script pip writes for it: its return value is the exit status
    if args[0] != "-m" and not os.path.isfile(args[0]):  # instead of runpy's traceback
        sys.stderr.write(f"python -m trainer.as_lightning: error: no such script: {args[0]!r}\n")
        raise SystemExit(2)
    install()
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return
    sys.argv = args
    sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))  # as `python SCRIPT` puts the script's folder first
    runpy.run_path(args[0], run_name="__main__")


def _console_script(name: str) -> Callable[[], object]:
    """The installed console script ``name``'s function, not yet imported; a one-line error (status 2) when
    no installed package declares it, with the closest names."""
    import difflib
    from importlib.metadata import entry_points

    try:
        declared = entry_points(group="console_scripts")
    except TypeError:  # Python 3.9: a mapping of groups
        declared = entry_points().get("console_scripts", ())  # type: ignore[arg-type,attr-defined,unused-ignore]
    scripts = {ep.name: ep for ep in declared}
    if name not in scripts:
        close = difflib.get_close_matches(name, list(scripts), n=3)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        sys.stderr.write(f"python -m trainer.as_lightning: error: no installed console script {name!r}{hint}\n")
        raise SystemExit(2)

    def run() -> object:
        return scripts[name].load()()  # loaded after install(): the package imports Lockstep as Lightning

    return run
