"""Checkpoints written by main at b722602 (one file, and FSDP's sharded directory) resume exactly on
today's code: the final parameters of the uninterrupted run (to 1e-6) and its global step.

The fixtures and the script that wrote them are in tests/fixtures/ (main_checkpoint.py)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from tests.fixtures.main_checkpoint import FSDP, SINGLE, fsdp, resume
from tests.helpers.distributed import run_ranks

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _matches(got, want):
    assert got["global_step"] == want["global_step"]
    assert len(got["params"]) == len(want["params"])
    for a, b in zip(got["params"], want["params"]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_a_single_file_checkpoint_of_main_resumes_exactly(tmp_path):
    ckpt = shutil.copy(FIXTURES / f"{SINGLE}.ckpt", tmp_path)  # the fixture itself stays untouched
    _matches(resume(str(ckpt), default_root_dir=str(tmp_path)), torch.load(FIXTURES / f"{SINGLE}_expected.pt"))


def _fsdp_resume(rank, world_size, ckpt, root):
    torch.set_num_threads(1)
    return resume(ckpt, strategy=fsdp(), default_root_dir=root)


@pytest.mark.distributed
def test_an_fsdp_sharded_checkpoint_of_main_resumes_exactly(tmp_path):
    ckpt = shutil.copytree(FIXTURES / f"{FSDP}.ckpt", tmp_path / f"{FSDP}.ckpt")
    results = run_ranks(_fsdp_resume, world_size=2, args=(str(ckpt), str(tmp_path)), init_group=False, timeout=150)
    want = torch.load(FIXTURES / f"{FSDP}_expected.pt")
    for got in results:
        _matches(got, want)
