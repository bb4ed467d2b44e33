"""`import trainer` stays cheap: no tensorboard / torchvision / tqdm at import time."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.distributed_helpers import REPO_ROOT


def _import_seconds(stmt: str) -> float:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", stmt], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    ).stderr
    total = 0
    for line in out.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() and not parts[2].startswith("  "):
            if parts[1].strip().isdigit():
                total += int(parts[1])
    return total / 1e6


@pytest.mark.timeout(120)
def test_import_trainer_adds_little_over_torch():
    # Take the best of a few runs of each: the machine is shared and noisy.
    torch_only = min(_import_seconds("import torch") for _ in range(3))
    with_trainer = min(_import_seconds("import torch, trainer, callbacks") for _ in range(3))
    assert with_trainer - torch_only < 0.3, (torch_only, with_trainer)


def test_no_heavy_imports():
    # Some torch releases import tqdm themselves: only count what `trainer` adds to `import torch`.
    code = (
        "import sys, torch; before = set(sys.modules); import trainer, callbacks; "
        "heavy = ('tensorboard', 'torchvision', 'tqdm', 'torch.utils.tensorboard'); "
        "print(sorted(m for m in heavy if m in sys.modules and m not in before))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    assert out.stdout.strip() == "[]"
