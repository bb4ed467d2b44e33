"""`import trainer` stays cheap: no tensorboard / torchvision / tqdm at import time."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.distributed import REPO_ROOT


def _seconds_after_torch() -> float:
    """Import time of `trainer` and `callbacks` in a process that has already imported torch."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import torch; import trainer, callbacks"],
        capture_output=True, text=True, check=True, cwd=REPO_ROOT,
    ).stderr
    total, after_torch = 0, False
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2]
        if name.strip() == "torch" and not name.startswith("  "):
            after_torch = True
            continue
        if after_torch and not name.startswith("  "):  # a top-level import: its cumulative time
            total += int(parts[1])
    return total / 1e6


@pytest.mark.timeout(120)
def test_import_trainer_adds_little_over_torch():
    # In one process, so torch's own (noisy) import time does not enter the difference; the best
    # of three runs, because the machine is shared.
    extra = min(_seconds_after_torch() for _ in range(3))
    assert extra < 0.3, extra


def test_no_heavy_imports():
    # Some torch releases import tqdm themselves: only count what `trainer` adds to `import torch`.
    code = (
        "import sys, torch; before = set(sys.modules); import trainer, callbacks; "
        "heavy = ('tensorboard', 'torchvision', 'tqdm', 'torch.utils.tensorboard'); "
        "print(sorted(m for m in heavy if m in sys.modules and m not in before))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    assert out.stdout.strip() == "[]"
