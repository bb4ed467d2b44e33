"""`trainer.predict` under several processes returns every prediction exactly once, in dataset
order, to every rank (`python script.py` with devices=2, whose workers run under torch's elastic agent
as under torchrun) and, under ddp_spawn, to the
launching process (tests/scripts/ddp_predict.py).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.distributed import read_rank_results, run_script

SCRIPT = str(Path(__file__).parents[1] / "scripts" / "ddp_predict.py")
REPO = str(Path(__file__).resolve().parents[2])

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
    env = {"LOCKSTEP_TEST_OUT": str(tmp_path)}
    proc = run_script([SCRIPT, *args], env=env, cwd=REPO, timeout=120, **kwargs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, read_rank_results(tmp_path)


def test_ddp_spawn_predict_returns_every_row_once_in_order_to_the_launching_process(tmp_path):
    # one case: each predict under ddp_spawn starts new processes (the others share the code path)
    args = ["--devices", "2", "--strategy", "ddp_spawn", "--cases", "20"]
    proc, [result] = _launch(tmp_path, *args, launcher="python")
    _check(result)
    assert "not sharded by the Trainer" not in proc.stderr


def test_self_launched_predict_returns_every_row_once_in_order_on_every_rank(tmp_path):
    # `python script.py` with devices=2 runs its workers under torch's elastic agent, as torchrun
    # does, with the same environment: one launch covers both (tests/launch checks that a
    # Trainer adopts a torchrun launch).
    cases = "20,21,two_loaders,own_sampler"
    proc, results = _launch(tmp_path, "--cases", cases, "--devices", "2", launcher="python", nproc=2)
    assert len(results) == 2
    for result in results:
        _check(result)
        # The user's DistributedSampler (strided, padded) is kept: its shards come back rank by
        # rank, with a warning that this is not dataset order.
        assert _rows(result["own_sampler"]) == list(range(0, 20, 2)) + list(range(1, 20, 2))
    warning = "predict: dataloader(s) [0] were not sharded by the Trainer"
    assert proc.stderr.count(warning) == 1, proc.stderr[-3000:]
