"""The benchmark suite's own logic: workloads round-trip, loops agree, reports judge correctly.

No timing is asserted here (timings live in ``python -m benchmarks.run``); these tests keep the
suite honest: the hand-written loop and Lockstep train the identical model to the identical
loss, and a parity break or a missed target is reported as such.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import report
from benchmarks.frameworks import lockstep_bench
from benchmarks.handwritten import ddp_ga, fsdp, single
from benchmarks.launch import REPO_ROOT, bench_env
from benchmarks.scenarios import scenarios
from benchmarks.workload import Workload, parse_args
from tests.helpers.distributed import run_ranks
from tests.helpers.session_cache import once_per_session

pytestmark = pytest.mark.timeout(120)

TINY = Workload(hidden=8, batch_size=4, samples=24, epochs=2)


def test_workload_round_trips_through_the_command_line(tmp_path):
    work, args = parse_args([*TINY.to_argv(), "--out", str(tmp_path)])
    assert work == TINY and args.out == str(tmp_path) and not args.defaults
    assert args.device == "cpu" and args.strategy == "ddp"


@pytest.mark.parametrize("defaults", [False, True])
def test_handwritten_and_lockstep_train_alike(tmp_path, defaults):
    single.train([*TINY.to_argv(), "--out", str(tmp_path / "hand")])
    extra = ["--defaults"] if defaults else []
    lockstep_bench.main([*TINY.to_argv(), "--out", str(tmp_path / "lock"), *extra])
    hand = json.loads((tmp_path / "hand" / "rank0.json").read_text())
    lock = json.loads((tmp_path / "lock" / "rank0.json").read_text())
    assert hand["steps"] == lock["steps"] == 12  # 6 batches x 2 epochs
    assert lock["final_loss"] == pytest.approx(hand["final_loss"], abs=1e-6)
    assert lock["step_s"] > 0 and lock["step_cpu_s"] > 0 and lock["peak_rss_mb"] > 0


def _run(step: float, loss: float = 1.0, steps: int = 10, first: float = 0.5, rss: float = 100.0,
         state: int = 1000) -> dict:
    return {"step_s": step, "step_cpu_s": step, "rank_steps": [steps], "steps": steps, "final_loss": loss,
            "first_step_s": first, "peak_rss_mb": rss, "wall_s": 1.0, "peak_device_mb": None,
            "rank_state_bytes": [{"params": state, "grads": state, "optimizer": 2 * state, "total": 4 * state}]}


def _summary(lockstep_factor: float, lockstep_loss: float = 1.0, shard: float = 0.5) -> dict:
    imports = report.summarize_imports({"lockstep": [(1.0, 0.1), (1.2, 0.12)]})
    summary: dict = {"scenarios": {}, "imports": imports}
    for s in scenarios(quick=True):
        runs = {v.name: [_run(step, state=int(1000 * (shard if v.sharded else 1))) for step in (0.01, 0.02)]
                for v in s.variants}
        runs["lockstep"] = [_run(step * lockstep_factor, lockstep_loss) for step in (0.01, 0.02)]
        summary["scenarios"][s.key] = report.summarize_scenario(s, runs)
    summary["targets"] = report.targets(summary)
    return summary


def test_ratios_are_paired_medians_and_targets_judge_them():
    good = _summary(1.01)
    assert good["scenarios"]["s1_small"]["variants"]["lockstep"]["ratio"] == pytest.approx(1.01)
    verdicts = {t["target"]: t["passed"] for t in good["targets"]}
    assert all(verdicts.values()), verdicts
    slow = {t["target"]: t["passed"] for t in _summary(1.04)["targets"]}
    assert slow["s1_small: step time Lockstep / hand-written"]  # <= 1.05
    assert not slow["s2_large: step time Lockstep / hand-written"]  # > 1.02
    assert "| lockstep |" in report.markdown(good)


def test_a_different_final_loss_breaks_parity():
    targets = _summary(1.0, lockstep_loss=1.001)["targets"]
    parity = [t for t in targets if "parity" in t["target"]]
    assert parity and not any(t["passed"] for t in parity)
    assert all("lockstep" in t["value"] for t in parity)


def test_sharded_state_is_judged_against_one_over_the_world_size():
    verdicts = {t["target"]: t["passed"] for t in _summary(1.0)["targets"]}
    key = "s6_fsdp: lockstep fsdp per-rank parameter + gradient + optimizer bytes / DDP's"
    assert verdicts[key]
    assert not {t["target"]: t["passed"] for t in _summary(1.0, shard=0.6)["targets"]}[key]
    assert "| lockstep fsdp | 0.00 | 0.00 | 0.00 | 0.00 | 0.500 |" in report.markdown(_summary(1.0))


def test_the_plot_is_a_png_of_every_scenario(tmp_path):
    image = pytest.importorskip("matplotlib.image", reason="the plot needs matplotlib (the bench or dev extra)")

    path = report.plot(_summary(1.01), tmp_path / "plot" / "ratios.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 300 and pixels.shape[1] > 600
    assert pixels.std() > 0.05  # bars and text, not a blank canvas


@pytest.mark.launches
def test_device_cuda_without_a_gpu_is_a_clear_error(tmp_path):
    env = {**bench_env(), "CUDA_VISIBLE_DEVICES": ""}  # no GPU visible, also on a GPU machine
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--device", "cuda", "--json", str(tmp_path / "r.json")],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--device cuda needs a CUDA GPU, but torch.cuda.is_available() is False" in proc.stderr
    assert not (tmp_path / "r.json").exists()


# hidden 63: the first layer's 63 rows shard unevenly (32 + 31); accumulation 2 skips a reduce-scatter.
SHARDED = Workload(hidden=63, depth=2, batch_size=4, accumulate=2, samples=32, epochs=1)


def _ddp_then_fsdp(rank: int, world: int, out: str) -> None:
    argv = [*SHARDED.to_argv(), "--device", "cpu"]
    runs = [
        (ddp_ga.train, [*argv, "--out", os.path.join(out, "ddp")]),
        (fsdp.train, [*argv, "--out", os.path.join(out, "fsdp")]),
        (lockstep_bench.main, [*argv, "--strategy", "fsdp", "--out", os.path.join(out, "lockstep_fsdp")]),
    ]
    # Each run is written as a whole program: it makes its process group and destroys it. A rank
    # that starts the next run first would join rank 0's old store, which rank 0 then closes
    # ("Broken pipe"), so each run gets a rendezvous port of its own (a taken one makes
    # run_ranks retry on new ports).
    base = int(os.environ["MASTER_PORT"])
    for offset, (train, run_argv) in enumerate(runs):
        os.environ["MASTER_PORT"] = str(base + offset)
        train(run_argv)


@pytest.fixture(scope="module")
def sharded_runs(tmp_path_factory):
    """The three 2-rank runs, once per session (the two tests may run on two xdist workers)."""
    def run():
        out = tmp_path_factory.mktemp("sharded")
        run_ranks(_ddp_then_fsdp, 2, args=(str(out),), init_group=False)
        return {name: [json.loads((out / name / f"rank{r}.json").read_text()) for r in range(2)]
                for name in ("ddp", "fsdp", "lockstep_fsdp")}

    return once_per_session(tmp_path_factory, "tests/project/test_benchmarks.py::sharded_runs", run)


@pytest.mark.distributed
@pytest.mark.parametrize("name", ["fsdp", "lockstep_fsdp"])
def test_fsdp_ranks_hold_a_shard_of_ddps_training_state(sharded_runs, name):
    ddp = [r["state_bytes"] for r in sharded_runs["ddp"]]
    shards = [r["state_bytes"] for r in sharded_runs[name]]
    assert ddp[0] == ddp[1] and ddp[0]["params"] == 4 * sum(  # fp32, every parameter on every rank
        n for n in (1024 * 63 + 63, 2 * (63 * 63 + 63), 63 * 256 + 256))
    for kind in ("params", "grads"):  # the shards partition the tensors exactly
        assert shards[0][kind] + shards[1][kind] == ddp[0][kind]
    # AdamW's exp_avg and exp_avg_sq are sharded; its 4-byte `step` per parameter is on every rank.
    assert shards[0]["optimizer"] + shards[1]["optimizer"] == ddp[0]["optimizer"] + 4 * 8
    for shard in shards:  # about 1/W each: uneven by at most one row of each tensor
        assert 0.49 * ddp[0]["total"] < shard["total"] < 0.51 * ddp[0]["total"]
    # ... and FSDP trains the same model as DDP
    assert sharded_runs[name][0]["steps"] == sharded_runs["ddp"][0]["steps"] == 2
    assert sharded_runs[name][0]["final_loss"] == pytest.approx(sharded_runs["ddp"][0]["final_loss"], abs=1e-6)


def test_peers_are_optional_variants():
    for s in scenarios():
        assert s.baseline.name == "handwritten"
        assert {v.needs for v in s.variants} <= {None, "lightning", "accelerate"}
        assert all(v.script for v in scenarios(device="cuda")[0].variants)
    assert {s.device for s in scenarios(device="cuda")} == {"cuda"}
    assert Path(report.__file__).parent.joinpath("handwritten", "ddp_ga.py").exists()


@pytest.mark.launches
def test_gpu_check_without_cuda_says_so_and_fails(tmp_path):
    # CUDA_VISIBLE_DEVICES="" hides every GPU, so this is the no-CUDA path on any machine.
    report = tmp_path / "gpu.md"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", "--report", str(report)],
        cwd=REPO_ROOT, env={**bench_env(), "CUDA_VISIBLE_DEVICES": ""}, capture_output=True, text=True, timeout=100,
    )
    assert proc.returncode == 2, proc.stderr
    assert "no CUDA device is visible" in proc.stderr and "nothing was checked" in proc.stderr
    assert not report.exists()
