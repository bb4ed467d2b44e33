"""A torchvision that is installed but cannot be imported (a CUDA build beside a CPU-only torch raises
RuntimeError on import, not ImportError) is one skip reason for every test that needs it, never an
error, and the library's own import of it says what is wrong in one line."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.lightning.demos.mnist_datamodule import _import_torchvision

ROOT = Path(__file__).resolve().parents[2]
BROKEN = 'raise RuntimeError("operator torchvision::nms does not exist")\n'
# Lightning and torchmetrics import torchvision: module-level and in-test skips, a torchvision example
TEST_FILES = ["tests/demos/test_boring_classes.py", "tests/metrics/test_logging_parity.py",
              "tests/project/test_image_classifier_example.py"]


def _plant(folder: Path, name: str) -> None:
    (folder / name).mkdir()
    (folder / name / "__init__.py").write_text(BROKEN)


@pytest.mark.launches
@pytest.mark.timeout(300)
def test_a_broken_torchvision_is_one_skip_reason_and_no_error(tmp_path):
    _plant(tmp_path, "torchvision")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-rs", *TEST_FILES],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    summary = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.fullmatch(r"(=+ )?(\d+ passed, )?\d+ skipped in .*", summary), summary  # no failure, no error
    reasons = set(re.findall(r"^SKIPPED \[\d+\] [^:]+:\d+: (.*)$", proc.stdout, re.MULTILINE))
    assert reasons == {
        "torchvision is installed but cannot be imported (RuntimeError: operator torchvision::nms does not "
        f"exist): install the torchvision build that matches torch {__import__('torch').__version__}"}


def test_the_library_names_a_broken_torchvision_in_one_line(tmp_path, monkeypatch):
    _plant(tmp_path, "planted_vision")  # a fresh name: the real torchvision may be imported already
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError) as error:
        _import_torchvision("planted_vision")
    assert str(error.value).startswith(
        "torchvision is installed but cannot be imported (RuntimeError: operator torchvision::nms does not exist): "
        "install the torchvision build that matches torch ")
    with pytest.raises(ModuleNotFoundError):
        _import_torchvision("not_installed_vision")


_BYPASS = re.compile(r"""pytest\.importorskip\(\s*["'](lightning|pytorch_lightning|torchmetrics|torchvision)\b"""
                     r"""|find_spec\(\s*["'](lightning|pytorch_lightning|torchmetrics)["']\s*\)""")


def _bypasses(root: Path) -> list[str]:
    return [f"{path.relative_to(root)}:{text[:m.start()].count(chr(10)) + 1}"
            for path in sorted((root / "tests").rglob("test_*.py")) if path.resolve() != Path(__file__).resolve()
            for text in [path.read_text(encoding="utf-8")] for m in _BYPASS.finditer(text)]


def test_every_test_asks_for_lightning_torchmetrics_and_torchvision_through_the_one_helper():
    # pytest.importorskip catches ImportError only, and find_spec finds a package that cannot be imported:
    # with a broken torchvision, Lightning and torchmetrics (which import it) would fail instead of skip
    assert _bypasses(ROOT) == []


def test_the_bypass_check_finds_pytest_importorskip_and_find_spec(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        'import pytest\npytest.importorskip("lightning")\nif importlib.util.find_spec("torchmetrics") is None:\n    pass\n'
        'pytest.importorskip("jsonargparse")\n')
    assert _bypasses(tmp_path) == ["tests/test_x.py:2", "tests/test_x.py:3"]
