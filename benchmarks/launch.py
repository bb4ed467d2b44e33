"""Running one variant of a scenario in fresh processes and collecting its per-rank results."""
from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.scenarios import Scenario, Variant

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent


# glibc malloc returns freed memory at the top of its heap to the OS ("trimming") and serves
# large blocks with fresh mmaps; which of a step's gradient and activation buffers then fault
# their pages in again depends on each process's allocation history. Identical runs measured
# 13-21 ms per step on scenario 2 with 600-3500 page faults per step. Fixed thresholds (blocks
# up to 32 MiB from the heap, no trimming) make every loop allocate alike, in the steady state
# without page faults; `--default-malloc` measures without them.
PINNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(4 * 2**30)}


def bench_env(pin_malloc: bool = True) -> dict[str, str]:
    """The environment of every benchmark process: the checkout importable, one OpenMP thread,
    and (unless ``pin_malloc=False``) glibc malloc thresholds that do not vary between runs."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    if pin_malloc:
        env.update(PINNED_MALLOC)
    return env


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def command(scenario: Scenario, variant: Variant, out_dir: Path) -> list[str]:
    """The command line: ``python script`` for one process, torchrun for several."""
    script = str(BENCH_DIR / variant.script)
    args = [script, *scenario.workload.to_argv(), "--out", str(out_dir), "--device", scenario.device,
            *variant.extra]
    if scenario.nproc == 1:
        return [sys.executable, *args]
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc_per_node", str(scenario.nproc),
        "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
        *args,
    ]


def run_variant(
    scenario: Scenario, variant: Variant, out_dir: Path, timeout: float = 240, pin_malloc: bool = True
) -> dict[str, Any]:
    """Run ``variant`` once: rank 0's timings and loss, the largest peak RSS (and GPU memory) of
    any rank, and every rank's training-state bytes (``rank_state_bytes``, where measured)."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    start = time.perf_counter()
    with open(out_dir / "stdout.log", "w") as log:
        proc = subprocess.run(
            command(scenario, variant, out_dir), env=bench_env(pin_malloc), cwd=REPO_ROOT,
            stdout=log, stderr=subprocess.PIPE, text=True, timeout=timeout,
        )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(
            f"{scenario.key} / {variant.name} failed with exit code {proc.returncode}:\n{proc.stderr[-4000:]}"
        )
    ranks = [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(scenario.nproc)]
    result = dict(ranks[0])
    result["peak_rss_mb"] = max(r["peak_rss_mb"] for r in ranks)
    device_mb = [r["peak_device_mb"] for r in ranks if r.get("peak_device_mb") is not None]
    result["peak_device_mb"] = max(device_mb) if device_mb else None
    result["rank_state_bytes"] = [r.get("state_bytes") for r in ranks]
    result["rank_steps"] = [r["steps"] for r in ranks]
    result["wall_s"] = wall
    shutil.rmtree(out_dir / "run", ignore_errors=True)  # logs and checkpoints of --defaults runs
    return result


_IMPORT_PROBE = (
    "import time, json; t0 = time.perf_counter(); import torch; t1 = time.perf_counter(); "
    "import {module}; t2 = time.perf_counter(); print(json.dumps([t1 - t0, t2 - t1]))"
)


def import_seconds(module: str) -> tuple[float, float]:
    """(seconds to ``import torch``, seconds ``import module`` adds on top) in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE.format(module=module)],
        env=bench_env(), cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=120,
    )
    torch_s, extra_s = json.loads(out.stdout.strip().splitlines()[-1])
    return torch_s, extra_s


def median(values: list[float]) -> float | None:
    """The median, or None for no values."""
    return statistics.median(values) if values else None
