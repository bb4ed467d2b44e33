"""Run the fault matrix and print its table: case x launcher -> seconds to end, rank named, leftovers.

    python tests/faults/report.py [extra pytest arguments, e.g. -k sigkill]

Runs ``pytest tests/faults`` with ``$LOCKSTEP_FAULT_REPORT`` set, so every run appends its row,
then prints one Markdown table, the matrix's wall time and the CPU time its processes used
(orphans the suite had to kill are not counted). Exits with pytest's status.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
COLUMNS = (
    "case", "launcher", "exit", "s after fault", "s in all", "rank named", "leftovers", "newest ckpt",
    "verdict",
)


def _row(r: dict) -> list[str]:
    ckpts = r["checkpoints"]
    newest = ckpts.get("last.ckpt")
    if newest is None and ckpts:
        newest = max(ckpts.values(), key=lambda c: c.get("step", -1))
    if newest is None:
        ckpt = "none"
    elif "error" in newest:
        ckpt = "unloadable"
    else:
        ckpt = f"step {newest['step']}" + ("" if newest["finite"] else " NaN")
    return [
        r["case"],
        r["launcher"],
        "killed (hang)" if r["returncode"] is None else str(r["returncode"]),
        "-" if r["fault_to_end_s"] is None else f"{r['fault_to_end_s']:.1f}",
        f"{r['total_s']:.1f}",
        "-" if r["rank_named"] is None else str(r["rank_named"]),
        str(len(r["leftovers"])),
        ckpt,
        "ok" if not r["problems"] else "; ".join(r["problems"]),
    ]


def table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_row(r)) + " |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="lockstep-faults-") as tmp:
        rows_path = Path(tmp) / "rows.jsonl"
        env = {**os.environ, "LOCKSTEP_FAULT_REPORT": str(rows_path)}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        started = time.monotonic()
        code = subprocess.call(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/faults", *sys.argv[1:]],
            cwd=REPO_ROOT, env=env,
        )
        wall = time.monotonic() - started
        # CPU seconds of every process the matrix ran (all are waited for, or killed and reaped):
        # unlike wall time it does not depend on what else the machine is doing.
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = usage.ru_utime + usage.ru_stime
        rows = [json.loads(line) for line in rows_path.read_text().splitlines()] if rows_path.exists() else []
    print()
    print(table(rows))
    print(f"\n{len(rows)} runs, matrix wall time {wall:.0f} s, {cpu:.0f} CPU s (pytest exit status {code})")
    return code


if __name__ == "__main__":
    sys.exit(main())
