"""The GPU proof kit: ``python -m benchmarks.gpu_check [--report FILE]``, one command on a machine
with CUDA GPUs (under 8 minutes on one or two).

It runs, each in its own process with its own time limit:

1. every CUDA test (``pytest -m cuda``): CUDA resume (bitwise), prefetching, SyncBatchNorm on
   the GPU, manual optimization with ``16-mixed``, and tests/accelerators/test_cuda_proof.py:
   NCCL DDP on 2 GPUs (when there are 2), FSDP with ``bf16-mixed`` on CUDA and DALI on the GPU,
   each compared with a one-process reference;
2. the GPU benchmark table (``python -m benchmarks.run --quick --device cuda``);

and writes one Markdown report (default ``benchmarks/results/gpu_check.md``): the machine, each
test's outcome, the benchmark tables. Without a CUDA device it says so and exits with status 2,
having checked nothing. Exit status 1 when a step failed, 0 when all passed.
"""
from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REPORT = REPO_ROOT / "benchmarks" / "results" / "gpu_check.md"
NO_CUDA_EXIT = 2
# Time limits (seconds) that keep the whole kit under 8 minutes.
TESTS_LIMIT_S = 300
BENCHMARK_LIMIT_S = 150


def cuda_devices() -> list[str]:
    """The names of the visible CUDA devices (empty without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def _run(command: list[str], limit: float) -> tuple[int | None, str, float]:
    """(exit status or None on timeout, output, seconds)."""
    started = time.monotonic()
    try:
        proc = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired as err:
        out = (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        return None, out, time.monotonic() - started
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


def _test_rows(junit: Path) -> list[tuple[str, str, str]]:
    """(test id, outcome, message) of every test in a JUnit XML file."""
    rows = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[kind]
                message = (found.get("message") or "").splitlines()[0][:160] if found.get("message") else ""
        rows.append((name, outcome, message))
    return rows


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", default=str(DEFAULT_REPORT), help=f"the Markdown report (default {DEFAULT_REPORT.relative_to(REPO_ROOT)})")
    parser.add_argument("--skip-benchmarks", action="store_true", help="the CUDA tests only")
    args = parser.parse_args(argv)

    devices = cuda_devices()
    if not devices:
        print(
            "[gpu_check] no CUDA device is visible (torch.cuda.is_available() is False): nothing was "
            "checked. Run this on a machine with one or more NVIDIA GPUs and a CUDA build of torch.",
            file=sys.stderr,
        )
        return NO_CUDA_EXIT

    import torch

    report = Path(args.report)
    report.parent.mkdir(parents=True, exist_ok=True)
    junit = report.with_suffix(".junit.xml")
    lines = [
        "# GPU check",
        "",
        f"- GPUs: {len(devices)} x {', '.join(sorted(set(devices)))}",
        f"- torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}",
        f"- Python {platform.python_version()}, {platform.platform()}",
        f"- NCCL DDP: {'run' if len(devices) >= 2 else 'skipped (needs 2 GPUs)'}",
        "",
    ]
    failed = False

    code, out, seconds = _run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda", "-rs", f"--junitxml={junit}", "tests"],
        TESTS_LIMIT_S,
    )
    status = "timed out" if code is None else ("passed" if code == 0 else f"failed (exit {code})")
    failed |= code != 0
    lines += [f"## CUDA tests (`pytest -m cuda`): {status}, {seconds:.0f} s", ""]
    if junit.exists():
        lines += ["| test | outcome | message |", "| --- | --- | --- |"]
        lines += [f"| `{name}` | {outcome} | {message.replace('|', '/')} |" for name, outcome, message in _test_rows(junit)]
        junit.unlink()
    lines += ["", "```", _tail(out, 15), "```", ""]

    if not args.skip_benchmarks:
        code, out, seconds = _run(
            [sys.executable, "-m", "benchmarks.run", "--quick", "--device", "cuda", "--no-peers"], BENCHMARK_LIMIT_S
        )
        status = "timed out" if code is None else ("done" if code == 0 else f"failed (exit {code})")
        failed |= code != 0
        tables = [line for line in out.splitlines() if line.startswith(("|", "#"))]
        lines += [f"## GPU benchmark table (`python -m benchmarks.run --quick --device cuda`): {status}, {seconds:.0f} s", ""]
        lines += tables or ["```", _tail(out), "```"]
        lines.append("")

    report.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"[gpu_check] report written to {report}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
