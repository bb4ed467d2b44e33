"""Turning raw runs into medians, ratios, parity checks, PASS/FAIL targets and Markdown tables."""
from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.launch import median
from benchmarks.scenarios import Scenario

LOSS_TOLERANCE = 1e-4

# (scenario key, largest median ratio Lockstep / hand-written)
STEP_TARGETS = (("s1_small", 1.05), ("s2_large", 1.02), ("s3_ddp", 1.03))
IMPORT_TARGET_S = 0.15  # `import trainer` may add this much to `import torch`
FIRST_STEP_TARGET_S = 1.0  # fit() to the first optimizer step, one process (scenario 1)
RSS_TARGET_RATIO = 1.05  # peak RSS per rank against the hand-written loop's
RSS_SCENARIOS = ("s2_large", "s3_ddp")


def summarize_scenario(scenario: Scenario, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per variant: medians, the median of per-repeat ratios to the baseline, and parity."""
    base_runs = runs[scenario.baseline.name]
    base_loss = base_runs[0]["final_loss"]
    base_steps = base_runs[0]["steps"]
    out: dict[str, Any] = {"title": scenario.title, "measures": scenario.measures,
                           "workload": dataclasses.asdict(scenario.workload),
                           "nproc": scenario.nproc, "variants": {}}
    for name, variant_runs in runs.items():
        paired = list(zip(variant_runs, base_runs))
        ratios = [r["step_s"] / b["step_s"] for r, b in paired if r["step_s"] and b["step_s"]]
        cpu_ratios = [r["step_cpu_s"] / b["step_cpu_s"] for r, b in paired
                      if r["step_cpu_s"] and b["step_cpu_s"]]
        overheads = [(r["step_s"] - b["step_s"]) * 1e6 for r, b in paired if r["step_s"] and b["step_s"]]
        first_extra = [r["first_step_s"] - b["first_step_s"] for r, b in paired
                       if r["first_step_s"] is not None and b["first_step_s"] is not None]
        steps = sorted({s for r in variant_runs for s in r["rank_steps"]})
        losses = [r["final_loss"] for r in variant_runs]
        loss_ok = all(loss is not None and abs(loss - base_loss) <= LOSS_TOLERANCE for loss in losses)
        out["variants"][name] = {
            "step_ms": _scaled(median([r["step_s"] for r in variant_runs if r["step_s"]]), 1e3),
            "ratio": median(ratios),
            "ratios": ratios,
            "cpu_ratio": median(cpu_ratios),
            "overhead_us": median(overheads),
            "steps": steps,
            "final_loss": losses[0],
            "parity": steps == [base_steps] and loss_ok,
            "first_step_s": median([r["first_step_s"] for r in variant_runs
                                    if r["first_step_s"] is not None]),
            "first_step_extra_s": median(first_extra),
            "peak_rss_mb": median([r["peak_rss_mb"] for r in variant_runs]),
            "wall_s": median([r["wall_s"] for r in variant_runs]),
            "runs": variant_runs,
        }
    return out


def summarize_imports(samples: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    """Median ``import torch`` time and what each framework's import adds on top of it."""
    torch_times = [t for values in samples.values() for t, _ in values]
    return {
        "torch_s": median(torch_times),
        "added_s": {name: median([extra for _, extra in values]) for name, values in samples.items()},
    }


def targets(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target that the measured scenarios allow checking, with its verdict."""
    found: list[dict[str, Any]] = []
    scen = summary["scenarios"]

    def add(name: str, value: float | None, limit: float, unit: str) -> None:
        if value is not None:
            found.append({"target": name, "value": value, "limit": limit, "unit": unit,
                          "passed": value <= limit})

    for key, limit in STEP_TARGETS:
        if key in scen:
            ratio = scen[key]["variants"]["lockstep"]["ratio"]
            add(f"{key}: step time Lockstep / hand-written", ratio, limit, "x")
    imports = summary.get("imports")
    if imports and "lockstep" in imports["added_s"]:
        add("import trainer - import torch", imports["added_s"]["lockstep"], IMPORT_TARGET_S, "s")
    if "s1_small" in scen:
        add("fit() to first optimizer step (one process)",
            scen["s1_small"]["variants"]["lockstep"]["first_step_s"], FIRST_STEP_TARGET_S, "s")
    for key in RSS_SCENARIOS:
        if key in scen:
            v = scen[key]["variants"]
            add(f"{key}: peak RSS per rank Lockstep / hand-written",
                v["lockstep"]["peak_rss_mb"] / v["handwritten"]["peak_rss_mb"], RSS_TARGET_RATIO, "x")
    for key, s in scen.items():
        bad = [name for name, v in s["variants"].items() if not v["parity"]]
        found.append({"target": f"{key}: parity (same optimizer steps, final loss within {LOSS_TOLERANCE:g})",
                      "value": ", ".join(bad) or "all equal", "limit": None, "unit": "", "passed": not bad})
    return found


def markdown(summary: dict[str, Any]) -> str:
    """The tables and target verdicts as Markdown (printed, and pasted into RESULTS.md)."""
    lines: list[str] = []
    for key, s in summary["scenarios"].items():
        lines += [f"### {s['title']}", "", f"_{s['measures']}_", "",
                  "| loop | ms / step | ratio to hand-written (median) | CPU-time ratio | overhead µs / step "
                  "| optimizer steps | final loss | setup to 1st step s | peak RSS MiB |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for name, v in s["variants"].items():
            lines.append(
                f"| {name} | {_f(v['step_ms'], 3)} | {_f(v['ratio'], 3)} | {_f(v['cpu_ratio'], 3)} | "
                f"{_f(v['overhead_us'], 0)} | "
                f"{'/'.join(map(str, v['steps']))}{'' if v['parity'] else ' ✗'} | {_f(v['final_loss'], 6)} | "
                f"{_f(v['first_step_s'], 3)} | {_f(v['peak_rss_mb'], 1)} |"
            )
        lines.append("")
    imports = summary.get("imports")
    if imports:
        lines += ["### 4a. start-up: import time on top of `import torch`", "",
                  f"`import torch` alone: {_f(imports['torch_s'], 3)} s (median)", "",
                  "| framework | import adds s (median) |", "| --- | ---: |"]
        for name, value in imports["added_s"].items():
            lines.append(f"| {name} | {_f(value, 3)} |")
        lines.append("")
    if "s1_small" in summary["scenarios"]:
        lines += ["### 4b. start-up: from handing over to the first optimizer step (scenario 1 runs)", "",
                  "Lockstep and Lightning: from `Trainer(...)` to the first step; Accelerate: from "
                  "`Accelerator(...)`; hand-written: from moving the model and building the optimizer. "
                  "The difference to the hand-written loop (median of paired runs) is the framework's "
                  "own share; the rest is torch's first-call cost, which every loop pays.", "",
                  "| loop | to 1st step s (median) | minus hand-written s |", "| --- | ---: | ---: |"]
        for name, v in summary["scenarios"]["s1_small"]["variants"].items():
            lines.append(f"| {name} | {_f(v['first_step_s'], 3)} | {_f(v['first_step_extra_s'], 3)} |")
        lines.append("")
    lines += ["### Targets", "", "| target | measured | limit | verdict |", "| --- | ---: | ---: | --- |"]
    for t in summary["targets"]:
        value = t["value"] if isinstance(t["value"], str) else f"{t['value']:.3f}{t['unit']}"
        limit = "" if t["limit"] is None else f"<= {t['limit']:g}{t['unit']}"
        lines.append(f"| {t['target']} | {value} | {limit} | {'PASS' if t['passed'] else 'FAIL'} |")
    return "\n".join(lines) + "\n"


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _f(value: Any, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"
