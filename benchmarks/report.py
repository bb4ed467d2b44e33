"""Turning raw runs into medians, ratios, parity checks, PASS/FAIL targets, Markdown tables and
the plot."""
from __future__ import annotations

import dataclasses
from pathlib import Path
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
SHARD_SLACK = 1.05  # a sharded rank's state may exceed 1/W of a replica's by this factor (uneven shards)
MIB = 2**20


def summarize_scenario(scenario: Scenario, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per variant: medians, the median of per-repeat ratios to the baseline, and parity."""
    base_runs = runs[scenario.baseline.name]
    base_loss = base_runs[0]["final_loss"]
    base_steps = base_runs[0]["steps"]
    base_state = _rank_state(base_runs[0])
    sharded = {v.name for v in scenario.variants if v.sharded}
    out: dict[str, Any] = {"title": scenario.title, "measures": scenario.measures,
                           "workload": dataclasses.asdict(scenario.workload), "device": scenario.device,
                           "nproc": scenario.nproc, "reports_state": scenario.reports_state, "variants": {}}
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
        state = _rank_state(variant_runs[0])
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
            "peak_device_mb": median([r["peak_device_mb"] for r in variant_runs
                                      if r.get("peak_device_mb") is not None]),
            "state_bytes": state,
            "state_ratio": state["total"] / base_state["total"] if state and base_state else None,
            "sharded": name in sharded,
            "wall_s": median([r["wall_s"] for r in variant_runs]),
            "runs": variant_runs,
        }
    return out


def _rank_state(run: dict[str, Any]) -> dict[str, int] | None:
    """The largest per-rank bytes of each kind of training state in one run (None: not measured).

    The sizes are the same in every run of a variant, so one run says it all; the largest rank
    is the one that has to fit.
    """
    ranks = [r for r in run.get("rank_state_bytes") or [] if r]
    if not ranks:
        return None
    return {kind: max(r[kind] for r in ranks) for kind in ranks[0]}


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
    for key, s in scen.items():
        for name, v in s["variants"].items():
            if v["sharded"]:
                add(f"{key}: {name} per-rank parameter + gradient + optimizer bytes / DDP's",
                    v["state_ratio"], SHARD_SLACK / s["nproc"], "x")
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
        gpu = any(v.get("peak_device_mb") is not None for v in s["variants"].values())
        lines += [f"### {s['title']}", "", f"_{s['measures']}_", "",
                  "| loop | ms / step | ratio to hand-written (median) | CPU-time ratio | overhead µs / step "
                  "| optimizer steps | final loss | setup to 1st step s | peak RSS MiB |"
                  + (" peak GPU MiB |" if gpu else ""),
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: |" if gpu else "")]
        for name, v in s["variants"].items():
            lines.append(
                f"| {name} | {_f(v['step_ms'], 3)} | {_f(v['ratio'], 3)} | {_f(v['cpu_ratio'], 3)} | "
                f"{_f(v['overhead_us'], 0)} | "
                f"{'/'.join(map(str, v['steps']))}{'' if v['parity'] else ' ✗'} | {_f(v['final_loss'], 6)} | "
                f"{_f(v['first_step_s'], 3)} | {_f(v['peak_rss_mb'], 1)} |"
                + (f" {_f(v.get('peak_device_mb'), 1)} |" if gpu else "")
            )
        lines.append("")
        if s.get("reports_state"):
            lines += [f"Training state per rank (the largest of the {s['nproc']} ranks), from the tensors "
                      "each rank holds (`benchmarks/memory.py`):", "",
                      "| loop | parameters MiB | gradients MiB | optimizer state MiB | total MiB | total / DDP's |",
                      "| --- | ---: | ---: | ---: | ---: | ---: |"]
            for name, v in s["variants"].items():
                b = v.get("state_bytes") or {}
                lines.append(f"| {name} | " + " | ".join(
                    _f(_scaled(b.get(kind), 1 / MIB), 2) for kind in ("params", "grads", "optimizer", "total")
                ) + f" | {_f(v.get('state_ratio'), 3)} |")
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


def plot(summary: dict[str, Any], path: str | Path) -> Path:
    """Write a PNG bar chart of each loop's step-time ratio to the hand-written loop, per scenario.

    One group of bars per scenario, one bar per loop other than the baseline (which is 1 by
    definition, drawn as a line); needs matplotlib (the ``bench`` extra).
    """
    # A bare Figure draws straight to the file: no pyplot, no GUI backend, no global state.
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    scenarios = summary["scenarios"]
    names: list[str] = []  # every loop but the baselines, in first-seen order: one colour each
    for s in scenarios.values():
        names += [n for n in list(s["variants"])[1:] if n not in names]
    fig = Figure(figsize=(max(6.0, 1.9 * len(scenarios) + 2), 4.2), dpi=110)
    ax = fig.subplots()
    colors = colormaps["tab10"]
    labelled: set[str] = set()
    for x, s in enumerate(scenarios.values()):
        bars = [(n, s["variants"][n]["ratio"]) for n in names
                if n in s["variants"] and s["variants"][n]["ratio"] is not None]
        width = 0.8 / max(1, len(bars))
        for i, (name, ratio) in enumerate(bars):
            bar = ax.bar(x + (i - (len(bars) - 1) / 2) * width, ratio, width, color=colors(names.index(name) % 10),
                         label=None if name in labelled else name)
            ax.bar_label(bar, labels=[f"{ratio:.2f}"], fontsize=7, padding=1)
            labelled.add(name)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label="hand-written loop = 1")
    ax.set_xticks(range(len(scenarios)))
    ax.set_xticklabels([_short_title(s["title"]) for s in scenarios.values()], fontsize=8)
    ax.set_ylabel("step time / hand-written loop's\n(median of paired repeats)")
    if any(s.get("reports_state") for s in scenarios.values()):
        ax.set_xlabel("in the FSDP scenario the hand-written loop is the DDP one", fontsize=8)
    torch_version = summary.get("machine", {}).get("versions", {}).get("torch", "")
    device = next((s.get("device", "cpu") for s in scenarios.values()), "cpu")
    ax.set_title(f"Step time against the hand-written loop\n{device}"
                 + (f", torch {torch_version.split('+')[0]}" if torch_version else "")
                 + (", quick run" if summary.get("quick") else ""), fontsize=10)
    ax.legend(fontsize=8, ncol=2)
    ax.set_ylim(0, max([1.2] + [v["ratio"] * 1.12 for s in scenarios.values()
                                for v in s["variants"].values() if v.get("ratio")]))
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out


def _short_title(title: str) -> str:
    """A scenario's title without its details (in parentheses, the micro batch), on two lines."""
    head = title.split(" (")[0].split(", micro")[0]
    words = head.split()
    half = (len(words) + 1) // 2
    return " ".join(words[:half]) + "\n" + " ".join(words[half:])


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _f(value: Any, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"
