"""Run the benchmark suite: ``python -m benchmarks.run [--quick] [--device cuda]``.

Every scenario runs each loop in fresh processes, interleaved (A B C ... then ... C B A, so slow
drift of a shared machine hits every loop alike), and reports the median over repeats of the
per-repeat ratio to the hand-written loop. Prints Markdown tables with PASS/FAIL targets, writes
everything, raw runs included, to ``benchmarks/results/latest.json`` and plots the ratios to
``benchmarks/results/latest.png``. ``--device cuda`` runs every process on its own GPU (NCCL
between ranks); scenarios with more processes than GPUs are skipped.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.launch import BENCH_DIR, REPO_ROOT, import_seconds, run_variant
from benchmarks.scenarios import IMPORTS, scenarios
from benchmarks.workload import DEVICES

STARTUP_KEY = "startup"
BUSY_LOAD = 1.5  # 1-minute load average above which timings are not worth recording


def machine_info(device: str = "cpu") -> dict[str, Any]:
    """What the numbers were measured on."""
    import torch

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {"torch": torch.__version__, "python": platform.python_version()}
    for name in ("lightning", "accelerate"):
        if importlib.util.find_spec(name) is not None:
            from importlib.metadata import version

            versions[name] = version(name)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    info = {"nproc": os.cpu_count(), "cpu": cpu, "platform": platform.platform(),
            "versions": versions, "commit": commit, "load_before": os.getloadavg()[0], "device": device}
    if device == "cuda":
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["versions"]["cuda"] = torch.version.cuda
    return info


def check_device(device: str) -> str | None:
    """Why ``device`` cannot run here (a sentence), or None when it can."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        return ("--device cuda needs a CUDA GPU, but torch.cuda.is_available() is False here "
                f"(torch {torch.__version__}, built with CUDA {torch.version.cuda}); run it on a GPU "
                "machine, or leave out --device to benchmark on the CPU")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="2 repeats, fewer epochs: a smoke run")
    parser.add_argument("--only", default="", help="scenario keys: s1_small,s2_large,s3_ddp,s6_fsdp,startup")
    parser.add_argument("--device", choices=DEVICES, default="cpu",
                        help="cpu (default), or cuda: one GPU per process, NCCL between ranks")
    parser.add_argument("--no-peers", action="store_true", help="skip PyTorch Lightning and HF Accelerate")
    parser.add_argument("--repeats", type=int, default=None, help="override the repeats of every scenario")
    parser.add_argument("--json", default=str(BENCH_DIR / "results" / "latest.json"), help="results file")
    parser.add_argument("--plot", default=None,
                        help="the PNG of step-time ratios (default: the results file with .png)")
    parser.add_argument("--default-malloc", action="store_true",
                        help="leave glibc's malloc thresholds alone (step times then vary between runs)")
    parser.add_argument("--strict", action="store_true", help="exit 1 on a failed target (parity: always)")
    args = parser.parse_args(argv)
    problem = check_device(args.device)
    if problem:
        parser.error(problem)

    began = time.perf_counter()
    info = machine_info(args.device)
    only = {k for k in args.only.split(",") if k}
    print(f"[bench] {info['cpu']}, {info['nproc']} CPUs, torch {info['versions']['torch']}, "
          f"load {info['load_before']:.2f}", flush=True)
    gpus = len(info.get("gpus", []))
    if gpus:
        print(f"[bench] --device cuda: {gpus} x {info['gpus'][0]}, CUDA {info['versions']['cuda']}", flush=True)
    if info["load_before"] > BUSY_LOAD:
        print(f"[bench] WARNING: load average {info['load_before']:.2f} > {BUSY_LOAD}: other work shares "
              "the CPUs and the timings will be noisy; rerun when the machine is quiet.", flush=True)

    peers = {}
    for module, extra in (("lightning", "PyTorch Lightning"), ("accelerate", "HF Accelerate")):
        peers[module] = not args.no_peers and importlib.util.find_spec(module) is not None
        if not peers[module] and not args.no_peers:
            print(f"[bench] SKIP {extra}: `{module}` is not installed (pip install -e \".[bench]\").",
                  flush=True)

    results_dir = Path(args.json).parent
    summary: dict[str, Any] = {"machine": info, "quick": args.quick, "pinned_malloc": not args.default_malloc,
                               "scenarios": {}}
    for scenario in scenarios(args.quick, args.device):
        if only and scenario.key not in only:
            continue
        if args.device == "cuda" and scenario.nproc > gpus:
            print(f"[bench] SKIP {scenario.title}: needs {scenario.nproc} GPUs, this machine has {gpus}.",
                  flush=True)
            continue
        variants = [v for v in scenario.variants if v.needs is None or peers[v.needs]]
        repeats = args.repeats or scenario.repeats
        runs: dict[str, list[dict[str, Any]]] = {v.name: [] for v in variants}
        print(f"[bench] {scenario.title}: {len(variants)} loops x {repeats} repeats", flush=True)
        for rep in range(repeats):
            for variant in variants if rep % 2 == 0 else variants[::-1]:
                out_dir = results_dir / "runs" / scenario.key / f"{variant.name.replace(' ', '_')}"
                result = run_variant(scenario, variant, out_dir, pin_malloc=not args.default_malloc)
                runs[variant.name].append(result)
                print(f"  rep {rep} {variant.name:<20} {1e3 * (result['step_s'] or 0):8.3f} ms/step  "
                      f"steps {result['steps']}  loss {result['final_loss']:.6f}  "
                      f"wall {result['wall_s']:.1f}s", flush=True)
        summary["scenarios"][scenario.key] = report.summarize_scenario(scenario, runs)

    if not only or STARTUP_KEY in only:
        names = [(name, module) for name, module in IMPORTS if name == "lockstep" or peers.get(module)]
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in names}
        repeats = args.repeats or (3 if args.quick else 5)
        print(f"[bench] 4. import time: {len(names)} frameworks x {repeats} repeats", flush=True)
        for rep in range(repeats):
            for name, module in names if rep % 2 == 0 else names[::-1]:
                samples[name].append(import_seconds(module))
        summary["imports"] = report.summarize_imports(samples)
        summary["imports"]["samples"] = samples

    summary["targets"] = report.targets(summary)
    summary["machine"]["load_after"] = os.getloadavg()[0]
    summary["elapsed_s"] = time.perf_counter() - began
    table = report.markdown(summary)
    print()
    print(table)
    print(f"[bench] {summary['elapsed_s']:.0f} s; load average before/after "
          f"{info['load_before']:.2f}/{summary['machine']['load_after']:.2f}; results in {args.json}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(summary, indent=1, default=str))
    if summary["scenarios"]:
        if importlib.util.find_spec("matplotlib") is None:
            print("[bench] SKIP the plot: `matplotlib` is not installed (pip install -e \".[bench]\").")
        else:
            png = report.plot(summary, args.plot or Path(args.json).with_suffix(".png"))
            print(f"[bench] plot in {png}")
    parity_ok = all(t["passed"] for t in summary["targets"] if "parity" in t["target"])
    if not parity_ok:
        return 1
    if args.strict and not all(t["passed"] for t in summary["targets"]):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
