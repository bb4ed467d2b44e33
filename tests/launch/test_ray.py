"""Lockstep inside Ray Train's `TorchTrainer`: a real local Ray cluster (2 CPUs), 2 workers, gloo.

One uninterrupted run serves several asserts (the module fixture ``straight``); the fault runs
have one run each. docs/ray.md describes what is tested here.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers import ray_runs
from tests.helpers.session_cache import once_per_session
from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import Trainer, seed_everything

ray = pytest.importorskip("ray")
from ray.train import FailureConfig, RunConfig, ScalingConfig  # noqa: E402
from ray.train.torch import TorchTrainer  # noqa: E402

pytestmark = [pytest.mark.launches, pytest.mark.distributed, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ray_cluster() -> Any:
    """A local Ray cluster with 2 CPUs, one per worker; its workers import this checkout."""
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), path]) if path else str(REPO)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    os.environ["PYTHONPATH"] = path
    if not path:
        del os.environ["PYTHONPATH"]


def _fit_on_ray(
    tmp: Path, name: str, max_failures: int = 0, fault: tuple[str, int, int] | None = None, fn: Any = ray_runs.fit_regression
) -> tuple[Any, Any]:
    """Ray's result and rank 0's outcome (None when the run failed) of ``fn`` (`ray_runs`)."""
    out = tmp / f"{name}.pt"
    config = {"root": str(tmp / f"{name}-root"), "out": str(out), "fault": fault, "marker": str(tmp / f"{name}.fault")}
    trainer = TorchTrainer(
        fn,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            storage_path=str(tmp / "ray-storage"), name=name, failure_config=FailureConfig(max_failures=max_failures)
        ),
    )
    try:
        result = trainer.fit()
    except Exception as err:  # noqa: BLE001 - a failed run: the error is what is tested
        return err, None
    return result, torch.load(out) if out.exists() else None


@pytest.fixture(scope="module")
def straight(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Any]:
    """The uninterrupted run, made once per session: its two tests may run on two xdist workers, and
    each Ray run costs about a minute and a half of CPU here. What Ray's result says, and rank 0's outcome."""
    def run() -> tuple[dict[str, Any], Any]:
        request.getfixturevalue("ray_cluster")  # only the worker that runs it starts a cluster
        result, outcome = _fit_on_ray(tmp_path_factory.mktemp("ray-straight"), "straight")
        if isinstance(result, BaseException):
            return {"error": repr(result)}, outcome
        return {"best_steps": [m["step"] for _, m in result.best_checkpoints], "metrics": dict(result.metrics),
                "checkpoint": result.checkpoint.path, "path": result.path}, outcome

    return once_per_session(tmp_path_factory, "tests/launch/test_ray.py::straight", run)


def _one_process() -> list[torch.Tensor]:
    """The run a 2-worker run must equal: one process, the global batch (2 x 4 x 2 = 16)."""
    seed_everything(0)
    module = Regression("sgd")
    trainer = Trainer(accelerator="cpu", max_epochs=ray_runs.EPOCHS, **QUIET)
    trainer.fit(module, loader(regression_data(ray_runs.N), 16, shuffle=True))
    return [p.detach() for p in module.parameters()]


def _assert_close(got: list[torch.Tensor], expected: list[torch.Tensor]) -> None:
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.timeout(900)
def test_two_ray_workers_equal_one_process_with_the_global_batch(straight):
    result, outcome = straight
    assert outcome is not None, f"the Ray run failed: {result}"
    assert outcome["source"] == "ray" and outcome["world_size"] == 2
    assert outcome["global_step"] == 6  # ceil(37 / 16) = 3 steps per epoch
    _assert_close(outcome["params"], _one_process())


@pytest.mark.timeout(600)
def test_allreduce_and_fsdp_join_rays_world_with_the_same_numbers(ray_cluster, tmp_path):
    result, outcome = _fit_on_ray(tmp_path, "strategies", fn=ray_runs.fit_strategies)
    assert outcome is not None, f"the Ray run failed: {result}"
    expected = _one_process()
    for name in ("allreduce", "fsdp"):
        assert outcome[f"{name}-source"] == "ray"
        _assert_close(outcome[name], expected)


@pytest.mark.timeout(900)
def test_reports_reach_rays_storage_on_model_checkpoints_schedule(straight):
    result, outcome = straight
    assert outcome is not None, f"the Ray run failed: {result}"
    assert outcome["reporters"][-1] == "RayReportCallback"  # on by default, after the checkpoint callbacks
    assert result["best_steps"] == [2, 4, 6]  # every_n_train_steps=2
    assert result["metrics"]["step"] == 6 and "train_loss" in result["metrics"]
    stored = Path(result["checkpoint"])
    assert stored.parent == Path(result["path"]) and (stored / "checkpoint.ckpt").is_file()
    saved = torch.load(stored / "checkpoint.ckpt", map_location="cpu", weights_only=False)
    assert saved["run_id"].startswith("ray-") and saved["world_size"] == 2


@pytest.mark.timeout(900)
def test_a_killed_worker_is_restarted_by_ray_and_resumes_the_same_run(ray_cluster, tmp_path):
    # SIGKILL rank 1 when it reaches step 5, mid-epoch 1 (steps 4-6); the last checkpoint is step 4's
    result, outcome = _fit_on_ray(tmp_path, "killed", max_failures=1, fault=("kill", 1, 5))
    assert outcome is not None, f"the Ray run failed: {result}"
    _assert_close(outcome["params"], _one_process())  # the uninterrupted run's (the first test)
    printed = outcome["printed"]
    assert re.search(r"\[lockstep\] Restart: world size 2 -> 2, accumulation 2 -> 2 \(global batch 16\), "
                     r"resumed from global step 4; 1 step\(s\) computed again", printed), printed
    assert result.metrics["step"] == 6 and (Path(result.checkpoint.path) / "checkpoint.ckpt").is_file()


@pytest.mark.timeout(600)
def test_an_error_raised_in_a_worker_is_named_by_rank_and_step_in_rays_result(ray_cluster, tmp_path):
    result, outcome = _fit_on_ray(tmp_path, "raised", fault=("raise", 1, 3))
    assert outcome is None
    error = result if isinstance(result, BaseException) else result.error
    assert "planted failure at step 3" in str(error)
    assert re.search(r"\[lockstep\] rank 1 failed at epoch 0, global step 3", str(error)), str(error)
