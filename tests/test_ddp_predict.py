"""`trainer.predict` under several processes returns every prediction exactly once, in dataset
order, to every rank and, under ddp_spawn, to the launching process (tests/scripts/ddp_predict.py).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from distributed_helpers import read_rank_results, run_script

SCRIPT = str(Path(__file__).parent / "scripts" / "ddp_predict.py")
REPO = str(Path(__file__).resolve().parent.parent)

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(150)]


def _rows(outputs: list[torch.Tensor]) -> list[int]:
    return torch.cat(outputs).tolist()


def _check(result: dict) -> None:
    assert result["world_size"] == 2
    assert _rows(result["20"]) == list(range(20))
    if "21" not in result:
        return
    assert _rows(result["21"]) == list(range(21))  # 11 rows on rank 0, 10 on rank 1
    first, second = result["two_loaders"]
    assert (_rows(first), _rows(second)) == (list(range(21)), list(range(7)))


def _launch(tmp_path: Path, *args: str, **kwargs):
    proc = run_script([SCRIPT, *args], env={"LOCKSTEP_TEST_OUT": str(tmp_path)}, cwd=REPO, timeout=120, **kwargs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "not sharded by the Trainer" not in proc.stderr
    return read_rank_results(tmp_path)


def test_ddp_spawn_predict_returns_every_row_once_in_order_to_the_launching_process(tmp_path):
    # one case: each predict under ddp_spawn starts new processes (the others share the code path)
    [result] = _launch(tmp_path, "--devices", "2", "--strategy", "ddp_spawn", "--cases", "20", launcher="python")
    _check(result)


def test_torchrun_predict_returns_every_row_once_in_order_on_every_rank(tmp_path):
    results = _launch(tmp_path, launcher="torchrun", nproc=2)
    assert len(results) == 2
    for result in results:
        _check(result)
