"""Issue 41: under ``python -m trainer.as_lightning`` two ranks see the data Lightning's DDP gives them, so a
library built on Lightning's Trainer gets Lightning's numbers (the library census's 2-process rows,
docs/migration.md). tests/scripts/lightning_ddp_data.py runs once on the installed Lightning and once
under the runner (2 CPU ranks, gloo); each test compares one thing rank by rank:

- a loader with its own sampler (chemprop) trains on Lightning's shares of what that sampler draws;
- a ``DataLoader`` subclass (neuralforecast) is built again with Lightning's sampler, which shuffles
  every training loader;
- ``validate`` and ``test`` run on Lightning's padded shards, their values rank-local (torchgeo);
- ``predict`` runs on Lightning's unpadded shards and returns each rank's own outputs (anomalib, torchgeo);
- each run starts from the generators as ``seed_everything`` left them, as Lightning's DDP reseeds;
- a value logged on_step with ``sync_dist=True`` is reduced as it is logged (``callback_metrics``, lightly);
- the first evaluation step after training gets rank 0's buffers, as through DDP's forward (pytorch_tabular's
  BatchNorm statistics).

Plain Lockstep keeps its own reading (tests/strategies, docs/distributed.md).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.distributed import run_script
from tests.helpers.optional import importorskip

pytestmark = [pytest.mark.launches, pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(300)]
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "lightning_ddp_data.py"
LAUNCH_TIMEOUT_S = 200


def _records(folder: Path, args: list[str]) -> list[dict[str, Any]]:
    folder.mkdir()
    done = run_script(args, launcher="python", env={"LOCKSTEP_TEST_OUT": str(folder)}, timeout=LAUNCH_TIMEOUT_S,
                      cwd=folder)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in (0, 1)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each rank's record under Lightning, then under the runner."""
    importorskip("lightning.pytorch")
    tmp = tmp_path_factory.mktemp("ddp-data")
    return _records(tmp / "lightning", [str(SCRIPT)]), _records(tmp / "lockstep", ["-m", "trainer.as_lightning", str(SCRIPT)])


def _same(runs: tuple[list[dict[str, Any]], list[dict[str, Any]]], keys: list[str]) -> None:
    theirs, ours = runs
    for rank in (0, 1):
        assert {k: ours[rank][k] for k in keys} == {k: theirs[rank][k] for k in keys}, f"rank {rank}"


def test_a_loader_with_its_own_sampler_trains_on_lightning_s_shares_of_its_draws(runs):
    theirs, _ = runs
    assert theirs[0]["fit_steps"] == 6  # 12 samples, batches of 2, 2 epochs, 2 ranks: each rank half
    _same(runs, ["fit_steps", "fit_params"])
    for rank in (0, 1):
        assert {k: v for k, v in runs[1][rank]["seen"].items() if k.startswith("fit")} == \
            {k: v for k, v in theirs[rank]["seen"].items() if k.startswith("fit")}


def test_a_dataloader_subclass_is_built_again_with_lightning_s_shuffled_shares(runs):
    _same(runs, ["series_steps", "series_params", "series_seen"])


def test_validate_and_test_run_on_lightning_s_padded_shards_with_rank_local_values(runs):
    theirs, ours = runs
    assert theirs[1]["seen"]["test"] == [[1, 3], [0]]  # 5 samples on 2 ranks: sample 0 again on rank 1
    assert theirs[0]["tested"] != theirs[1]["tested"]
    for rank in (0, 1):
        assert ours[rank]["seen"]["validate"] == theirs[rank]["seen"]["validate"]
        assert ours[rank]["seen"]["test"] == theirs[rank]["seen"]["test"]
    _same(runs, ["tested"])


def test_predict_returns_each_rank_s_own_predictions(runs):
    theirs, _ = runs
    assert [theirs[0]["predicted"], theirs[1]["predicted"]] == [[[0, 2], [4]], [[1, 3]]]
    _same(runs, ["predicted"])


def test_each_run_starts_from_the_generators_seed_everything_left(runs):
    _same(runs, ["series_init"])


def test_a_step_value_logged_with_sync_dist_is_reduced_in_the_callback_metrics(runs):
    theirs, _ = runs
    assert theirs[0]["train_loss"] == theirs[1]["train_loss"]  # the ranks' mean, though their batches differ
    _same(runs, ["train_loss"])


def test_validation_after_training_gets_rank_0_s_buffers_as_through_ddp_s_forward(runs):
    theirs, _ = runs
    assert theirs[0]["fit_buffers"] == theirs[1]["fit_buffers"]  # each rank's last training batch differs
    _same(runs, ["fit_buffers"])
