"""A newcomer's own `callbacks.py` or `trainer.py` next to their script hides Lockstep's package:
the error names the file and says to rename it (not "'callbacks' is not a package")."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.distributed import script_env


@pytest.mark.parametrize("own_file, script", [
    ("callbacks.py", "from trainer import Trainer\nprint(Trainer)\n"),
    ("trainer.py", "from callbacks import ModelCheckpoint\n"),
])
@pytest.mark.launches
def test_own_file_named_like_a_package_is_named_in_the_error(tmp_path, own_file, script):
    (tmp_path / own_file).write_text("value = 1\n")
    (tmp_path / "run.py").write_text(script)
    done = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, env=script_env(None),
                          capture_output=True, text=True, timeout=100)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    name = own_file[:-3]
    assert last == (
        f"ImportError: Lockstep's `{name}` package is hidden by {tmp_path / own_file}: Python finds that first "
        f"(the script's folder comes first on sys.path). Rename your file (for example to my_{name}.py) and "
        "delete its __pycache__ entry, then run again."
    )
