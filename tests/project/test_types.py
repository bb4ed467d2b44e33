"""The static type check: mypy over trainer/ and callbacks/ (setup.cfg [mypy]) finds no error.

It checks what name- and text-matching tests cannot: that each part uses the Trainer, the fit loop
and the callbacks as their protocols (`trainer.contracts.protocols`) type them, and that every
`# type: ignore` names its error code (``ignore-without-code``) and is still needed
(``warn_unused_ignores``).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mypy_finds_no_error_in_trainer_and_callbacks():
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "trainer", "callbacks"],
        capture_output=True, text=True, cwd=REPO, timeout=580,
    )
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert out.returncode == 0 and not errors, "mypy:\n" + "\n".join(errors or [out.stdout, out.stderr])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mypy_finds_a_callback_reaching_past_the_trainers_contract(tmp_path):
    # what the callbacks may use on the Trainer is `TrainerView`: the loop and private names are not
    sample = tmp_path / "reaching_callback.py"
    sample.write_text(
        "from __future__ import annotations\n"
        "from callbacks import Callback\n"
        "from trainer.contracts.protocols import ModuleView, TrainerView\n\n\n"
        "class Reaching(Callback):\n"
        "    def on_train_start(self, trainer: TrainerView, module: ModuleView) -> None:\n"
        "        trainer.fit_loop.agree_on_stop()\n"
        "        print(trainer._strategy, trainer.global_step)\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "setup.cfg", str(sample)],
        capture_output=True, text=True, cwd=REPO, timeout=580,
    )
    errors = [line.split(": error: ")[1] for line in out.stdout.splitlines() if ": error: " in line]
    assert [e.split(";")[0].split("  [")[0] for e in errors] == [
        '"TrainerView" has no attribute "fit_loop"',
        '"TrainerView" has no attribute "_strategy"',
    ], out.stdout

