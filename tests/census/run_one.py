"""One run of one census project: ``python -m tests.census.run_one FRAMEWORK PROJECT OUT``.

FRAMEWORK is ``lightning`` (the installed Lightning) or ``lockstep`` (the script started through
`trainer.lightning.alias.main`, as ``python -m trainer.as_lightning SCRIPT`` starts it). Before the
script runs, the harness seeds every generator with 0, applies the project's shrinks, and wraps the
`Trainer` class the script imports: every `Trainer` gets the project's `Trainer` arguments, and
every ``fit``/``validate``/``test``/``predict`` call is recorded (the model's parameters, the
trainer's ``global_step``, ``callback_metrics``, ``logged_metrics`` and the call's return value).
The record goes to OUT (`torch.save`), with the script's error, if any, as text.
"""
from __future__ import annotations

import functools
import json
import os
import random
import runpy
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from tests.census.projects import PROJECTS, Project
from tests.census.shrink import apply
from tests.census.vendor import script_path

_CALLS = ("fit", "validate", "test", "predict")


def _plain(value: Any) -> Any:
    """``value`` with every tensor detached onto the CPU, and containers rebuilt as lists and dicts."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value if isinstance(value, (int, float, str, bool, type(None))) else repr(type(value))


def _model_of(args: tuple[Any, ...], kwargs: dict[str, Any], trainer: Any) -> Any:
    model = args[0] if args else kwargs.get("model")
    if model is not None:
        return model
    # the module of an earlier call (`trainer.test(ckpt_path="best")`): Lightning's name, then Lockstep's
    return getattr(trainer, "lightning_module", None) or getattr(trainer, "module", None)


def _recorded(method: Callable[..., Any], call: str, calls: list[dict[str, Any]]) -> Callable[..., Any]:
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        entry: dict[str, Any] = {"call": call}
        calls.append(entry)
        try:
            entry["returned"] = _plain(result := method(self, *args, **kwargs))
            return result
        except BaseException as error:
            entry["raised"] = type(error).__name__
            raise
        finally:
            model = _model_of(args, kwargs, self)
            entry["params"] = _plain(model.state_dict()) if model is not None else {}
            entry["global_step"] = int(self.global_step)
            entry["callback_metrics"] = _plain(dict(self.callback_metrics))
            entry["logged_metrics"] = _plain(dict(self.logged_metrics))

    return run


def _instrument(trainer_class: type, project: Project, calls: list[dict[str, Any]]) -> None:
    init = trainer_class.__init__
    overrides = project.trainer_overrides()

    @functools.wraps(init)  # LightningCLI reads the Trainer's arguments off its signature
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **{**kwargs, **overrides})

    trainer_class.__init__ = __init__  # type: ignore[misc]
    for call in _CALLS:
        setattr(trainer_class, call, _recorded(getattr(trainer_class, call), call, calls))


def _notebook_as_script(notebook: Path, cells: int) -> Path:
    """The notebook's first ``cells`` code cells (all if 0) as one script in the working folder, IPython's
    magics and shell lines left out."""
    code = ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    # a cell magic (`%%html`) makes the whole cell IPython's; `!` and `%` lines are IPython's too
    lines = [line for cell in code[:cells or None] if not cell.lstrip().startswith("%%") for line in cell.split("\n")
             if not line.lstrip().startswith(("!", "%"))]
    script = Path.cwd() / f"{notebook.stem}.py"
    script.write_text("\n".join(lines) + "\n")
    return script


def _trainer_classes(framework: str, source: str) -> list[type]:
    if framework == "lockstep":
        from trainer.lightning.alias import install

        install()
        import trainer

        return [trainer.Trainer]
    names = [n for n in ("lightning.pytorch", "pytorch_lightning") if n in source] or ["lightning.pytorch"]
    return [__import__(name, fromlist=["Trainer"]).Trainer for name in names]


def run(framework: str, project: Project, calls: list[dict[str, Any]]) -> None:
    """Run ``project``'s script under ``framework``, appending its trainer calls to ``calls``."""
    torch.set_num_threads(1)  # two frameworks side by side; and one thread keeps CPU reductions in one order
    script = script_path(project)
    if project.entry:
        sys.path.insert(0, str(script.parent))  # the entry imports the vendored modules
        script = Path(__file__).resolve().parent / "entries" / project.entry
    if script.suffix == ".ipynb":
        script = _notebook_as_script(script, project.cells)
    for trainer_class in _trainer_classes(framework, script.read_text()):
        _instrument(trainer_class, project, calls)
    apply(project.shrink)
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    if framework == "lockstep":
        from trainer.lightning.alias import main

        main([str(script), *project.argv])
    else:
        sys.argv = [str(script), *project.argv]
        sys.path.insert(0, str(script.parent))  # as `python SCRIPT` (and the runner) put the script's folder first
        runpy.run_path(str(script), run_name="__main__")


def main() -> None:
    """The command line: FRAMEWORK PROJECT OUT."""
    framework, name, out = sys.argv[1:4]
    project = PROJECTS[name]
    record: dict[str, Any] = {"framework": framework, "calls": [], "error": None}
    try:
        run(framework, project, record["calls"])
    except SystemExit as done:
        if done.code not in (0, None):
            record["error"] = f"SystemExit({done.code})"
    except BaseException as error:  # the census reports a script's failure, whatever it is
        lines = traceback.format_exception(error)
        record["error"] = "".join(lines[-3:])[-1500:]
        record["error_line"] = f"{type(error).__name__}: {error}".splitlines()[0][:300]
    torch.save(record, out)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # a script's leftover threads (loggers, studies) must not hold the census up


if __name__ == "__main__":
    main()
