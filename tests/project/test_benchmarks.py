"""The benchmark suite's own logic: workloads round-trip, loops agree, reports judge correctly.

No timing is asserted here (timings live in ``python -m benchmarks.run``); these tests keep the
suite honest: the hand-written loop and Lockstep train the identical model to the identical
loss, and a parity break or a missed target is reported as such.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import report
from benchmarks.frameworks import lockstep_bench
from benchmarks.handwritten import single
from benchmarks.scenarios import scenarios
from benchmarks.workload import Workload, parse_args

pytestmark = pytest.mark.timeout(120)

TINY = Workload(hidden=8, batch_size=4, samples=24, epochs=2)


def test_workload_round_trips_through_the_command_line(tmp_path):
    work, args = parse_args([*TINY.to_argv(), "--out", str(tmp_path)])
    assert work == TINY and args.out == str(tmp_path) and not args.defaults


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


def _run(step: float, loss: float = 1.0, steps: int = 10, first: float = 0.5, rss: float = 100.0) -> dict:
    return {"step_s": step, "step_cpu_s": step, "rank_steps": [steps], "steps": steps, "final_loss": loss,
            "first_step_s": first, "peak_rss_mb": rss, "wall_s": 1.0}


def _summary(lockstep_factor: float, lockstep_loss: float = 1.0) -> dict:
    imports = report.summarize_imports({"lockstep": [(1.0, 0.1), (1.2, 0.12)]})
    summary: dict = {"scenarios": {}, "imports": imports}
    for s in scenarios(quick=True):
        runs = {v.name: [_run(0.01), _run(0.02)] for v in s.variants}
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


def test_peers_are_optional_variants():
    for s in scenarios():
        assert s.baseline.name == "handwritten"
        assert {v.needs for v in s.variants} <= {None, "lightning", "accelerate"}
    assert Path(report.__file__).parent.joinpath("handwritten", "ddp_ga.py").exists()
