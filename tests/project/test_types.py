"""The static type check: mypy over trainer/ and callbacks/ (setup.cfg [mypy]) finds no error.

It checks what name- and text-matching tests cannot: that each part uses the Trainer, the fit loop
and the callbacks as their protocols (`trainer.contracts.protocols`, `trainer.contracts.internals`)
type them, and that every
`# type: ignore` names its error code (``ignore-without-code``) and is still needed
(``warn_unused_ignores``).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Protocol

import pytest

from tests.helpers.session_cache import once_per_session, session_dir
from trainer.contracts import internals

REPO = Path(__file__).resolve().parents[2]


# The samples mypy reads beside trainer/, callbacks/ and the conformance module, each with the errors
# it must find. One mypy run checks them all (mypy takes about 90 CPU-seconds here, each run analysing
# the whole package again), made once per session for every xdist worker (tests/helpers/session_cache.py).
SAMPLES = {
    # what the callbacks may use on the Trainer is `TrainerView`: the loop and private names are not
    "reaching_callback.py": (
        "from __future__ import annotations\n"
        "from callbacks import Callback\n"
        "from trainer.contracts.protocols import ModuleView, TrainerView\n\n\n"
        "class Reaching(Callback):\n"
        "    def on_train_start(self, trainer: TrainerView, module: ModuleView) -> None:\n"
        "        trainer.fit_loop.agree_on_stop()\n"
        "        print(trainer._strategy, trainer.global_step)\n"
    ),
    # the conformance check sees a member's type and a member the class lacks
    "wrong_protocol.py": (
        "from typing import Protocol\n"
        "from trainer.loops.fit_loop import FitLoop\n"
        "from trainer.trainer import Trainer\n\n\n"
        "class Epochs(Protocol):\n"
        "    @property\n"
        "    def max_epochs(self) -> bytes | None: ...\n\n\n"
        "class Lacking(Protocol):\n"
        "    def no_such_method(self) -> None: ...\n\n\n"
        "def epochs(trainer: Trainer) -> Epochs:\n"
        "    return trainer\n\n\n"
        "def lacking(loop: FitLoop) -> Lacking:\n"
        "    return loop\n"
    ),
    # the signature survives `hint_misspelled_arguments`; a setting or run field has its field's type;
    # a misspelled attribute is an error (the Lightning `__getattr__` is not seen by the type checker)
    "typed_trainer.py": (
        "from typing_extensions import assert_type\n"
        "from trainer import Trainer\n"
        "from trainer.loops.fit_loop import FitLoop\n\n"
        "Trainer(max_epoch=3)\n"
        "Trainer(max_epochs='x')\n"
        "t = Trainer(max_epochs=3)\n"
        "assert_type(t.max_epochs, int | None)\n"
        "assert_type(t.default_root_dir, str)\n"
        "assert_type(t.should_stop, bool)\n"
        "assert_type(t.fit_loop, FitLoop)\n"
        "t.should_stop = True\n"
        "t.max_epoch\n"
    ),
}


def _run_mypy(folder: Path) -> dict[str, Any]:
    for name, text in SAMPLES.items():
        (folder / name).write_text(text)
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "setup.cfg", "trainer", "callbacks",
         "tests/project/conformance_check.py", *(str(folder / name) for name in SAMPLES)],
        capture_output=True, text=True, cwd=REPO, timeout=580,
    )
    errors: dict[str, list[str]] = {}
    for line in out.stdout.splitlines():
        if ": error: " in line:
            where, message = line.split(": error: ", 1)
            errors.setdefault(Path(where.split(":")[0]).name, []).append(message.split("  [")[0])
    return {"stdout": out.stdout + out.stderr, "errors": errors}


@pytest.fixture(scope="module")
def mypy_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = session_dir(tmp_path_factory) / "mypy-samples"
    folder.mkdir(exist_ok=True)
    return once_per_session(tmp_path_factory, "tests/project/test_types.py::mypy_run", lambda: _run_mypy(folder))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mypy_finds_no_error_in_trainer_and_callbacks(mypy_run):
    # the conformance module included: each real class given as the protocol its users receive
    ours = {name: errors for name, errors in mypy_run["errors"].items() if name not in SAMPLES}
    assert not ours, "mypy:\n" + mypy_run["stdout"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mypy_finds_a_callback_reaching_past_the_trainers_contract(mypy_run):
    assert [e.split(";")[0] for e in mypy_run["errors"].get("reaching_callback.py", [])] == [
        '"TrainerView" has no attribute "fit_loop"',
        '"TrainerView" has no attribute "_strategy"',
    ], mypy_run["stdout"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mypy_holds_the_real_classes_against_the_floor_s_protocols(mypy_run):
    assert mypy_run["errors"].get("wrong_protocol.py") == [
        'Incompatible return value type (got "Trainer", expected "Epochs")',
        'Incompatible return value type (got "FitLoop", expected "Lacking")',
    ], mypy_run["stdout"]
    assert "conformance_check.py" not in mypy_run["errors"], mypy_run["stdout"]


def _member_types(proto: type) -> dict[str, str]:
    """Each attribute's and property's declared type (as written), over the protocol's own classes."""
    types: dict[str, str] = {}
    for cls in reversed(proto.__mro__):
        if cls is object or not getattr(cls, "_is_protocol", False):
            continue
        types.update(getattr(cls, "__annotations__", {}))
        types.update({n: v.fget.__annotations__["return"] for n, v in vars(cls).items() if isinstance(v, property)})
    return types


@pytest.mark.parametrize("proto", [internals.TrainerInternals, internals.FitLoopView, internals.StrategyInternals, internals.ModuleInternals])
def test_the_internal_protocols_give_each_member_a_type(proto):
    # what the trainer's parts receive says what each component is: mypy checks each use against it
    untyped = sorted(name for name, written in _member_types(proto).items() if written == "Any")
    assert untyped == []


def test_the_member_type_check_finds_an_any_member():
    class Loose(internals.TrainerInternals, Protocol):
        anything: Any

    assert "Any" in _member_types(Loose).values()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mypy_sees_the_trainer_s_signature_and_the_types_of_its_settings(mypy_run):
    assert mypy_run["errors"].get("typed_trainer.py") == [
        'Unexpected keyword argument "max_epoch" for "Trainer"; did you mean "max_epochs"?',
        'Argument "max_epochs" to "Trainer" has incompatible type "str"; expected "int | None"',
        # the Lightning names the Trainer answers at run time are not guessed from a misspelling
        '"Trainer" has no attribute "max_epoch"',
    ], mypy_run["stdout"]


def test_a_setting_reads_the_field_of_its_own_name():
    from trainer.configuration import TrainerSettings, _Setting
    from trainer.run_state_fields import RunField, RunStateFields

    def refusal(name: str, base: type, attribute: object) -> str:
        with pytest.raises((TypeError, RuntimeError)) as error:  # Python 3.11 wraps __set_name__'s error
            type(name, (base,), {"__module__": __name__, name.lower(): attribute})
        return str(error.value.__cause__ or error.value)

    assert refusal("Max_epochs", TrainerSettings, _Setting(lambda c: c.limits.max_steps)) == (
        "Max_epochs.max_epochs must read limits.max_epochs, not limits.max_steps")
    assert refusal("Should_stop", RunStateFields, RunField(lambda run: run.optimizers)) == (
        "Should_stop.should_stop must read should_stop, not optimizers")
