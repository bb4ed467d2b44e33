"""`import trainer` stays cheap: no tensorboard / torchvision / tqdm, no third-party package at all,
and few modules on top of torch.

Counted, not timed: a shared or loaded machine makes any time bound either flaky or meaningless.
The import time itself is a benchmark figure (`python -m benchmarks.run`, its "startup" scenario).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.distributed import REPO_ROOT

# `import trainer, callbacks` imports about 80 modules beyond torch today (its own, and two
# stdlib ones); a heavy dependency pulled in by accident brings hundreds.
MAX_NEW_MODULES = 200


def _modules_added_to_torch() -> list[str]:
    code = (
        "import json, sys, torch; before = set(sys.modules); import trainer, callbacks; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.launches
def test_import_trainer_adds_only_its_own_modules_and_the_standard_library():
    added = _modules_added_to_torch()
    assert "trainer" in added and "callbacks" in added  # not vacuous: the imports happened here
    heavy = {"tensorboard", "torchvision", "tqdm", "torch.utils.tensorboard"}
    assert sorted(heavy & set(added)) == []  # torch may import tqdm itself: only what trainer adds counts
    packages = {name.split(".")[0] for name in added}
    foreign = sorted(packages - {"trainer", "callbacks"} - set(sys.stdlib_module_names))
    assert foreign == [], f"import trainer pulls in third-party packages: {foreign}"
    assert len(added) <= MAX_NEW_MODULES, f"{len(added)} modules on top of torch: {added}"
