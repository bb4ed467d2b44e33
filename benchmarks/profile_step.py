"""Lockstep's per-step overhead, measured and profiled in one process.

``python -m benchmarks.profile_step`` alternates the hand-written loop
(``handwritten/single.py``) and the same workload under Lockstep (``frameworks/lockstep_bench.py``)
in one warm process, several times, and prints each one's seconds per step and the median
difference: what the framework adds to every step, with no process start-up, import or
scheduler noise between the two. The default model is tiny, so the loop's own work dominates.
``--cprofile`` then profiles one more Lockstep run and lists the framework's own functions.

This is the developer's tool for the hot path; ``python -m benchmarks.run`` is the benchmark.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import tempfile
from pathlib import Path

from benchmarks.frameworks import lockstep_bench
from benchmarks.handwritten import single
from benchmarks.workload import Workload


def _step_s(run: object, work: Workload, extra: list[str]) -> tuple[float, float, float]:
    """(wall seconds, this process's CPU seconds, the 10th percentile of single steps' CPU seconds)
    per steady-state step of one run."""
    with tempfile.TemporaryDirectory() as out:
        run([*work.to_argv(), "--out", out, *extra])  # type: ignore[operator]
        result = json.loads((Path(out) / "rank0.json").read_text())
        return float(result["step_s"]), float(result["step_cpu_s"]), float(result["step_cpu_p10_s"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--defaults", action="store_true", help="Lockstep with its default callbacks")
    parser.add_argument("--cprofile", action="store_true", help="profile one more Lockstep run")
    args = parser.parse_args(argv)
    work = Workload(hidden=args.hidden, batch_size=args.batch_size, samples=args.samples, epochs=args.epochs)
    extra = ["--defaults"] if args.defaults else []

    _step_s(single.train, work, [])  # warm both paths: first-call costs are start-up, not steps
    _step_s(lockstep_bench.main, work, extra)
    runs: dict[str, list[tuple[float, float, float]]] = {"h": [], "l": []}
    for rep in range(args.repeats):
        pair = [("h", single.train), ("l", lockstep_bench.main)]
        for name, run in pair if rep % 2 == 0 else pair[::-1]:
            runs[name].append(_step_s(run, work, extra if name == "l" else []))
    hand, lock = [r[0] for r in runs["h"]], [r[0] for r in runs["l"]]
    diffs = [(b - a) * 1e6 for a, b in zip(hand, lock)]
    # CPU seconds leave out the time the process waited for a core: steadier on a busy machine
    cpu_diffs = [(b[1] - a[1]) * 1e6 for a, b in zip(runs["h"], runs["l"])]
    low_diffs = [(b[2] - a[2]) * 1e6 for a, b in zip(runs["h"], runs["l"])]
    print(f"workload {work}")
    print(f"hand-written  {statistics.median(hand) * 1e6:9.1f} us/step  {[round(x * 1e6) for x in hand]}")
    print(f"lockstep      {statistics.median(lock) * 1e6:9.1f} us/step  {[round(x * 1e6) for x in lock]}")
    print(f"overhead      {statistics.median(diffs):9.1f} us/step (median of paired differences)")
    print(f"ratio         {statistics.median(b / a for a, b in zip(hand, lock)):9.3f}")
    print(f"overhead CPU  {statistics.median(cpu_diffs):9.1f} us/step (the same, in process CPU time)")
    print(f"overhead p10  {statistics.median(low_diffs):9.1f} us/step (the same, of each run's 10th-percentile "
          f"step CPU time: for a busy machine; hand-written {statistics.median(r[2] for r in runs['h']) * 1e6:.1f} us)")

    if args.cprofile:
        profile = cProfile.Profile()
        profile.enable()
        _step_s(lockstep_bench.main, work, extra)
        profile.disable()
        stats = pstats.Stats(profile)
        stats.sort_stats("tottime").print_stats(r"trainer/|callbacks/", 30)


if __name__ == "__main__":
    main()
