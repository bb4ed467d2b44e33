"""Run a census project under Lightning and under Lockstep, and judge the pair.

Each framework runs in its own subprocess (`tests.census.run_one`) in its own empty folder, with
the same seed and the same harness-side shrinks. `judge` gives the row: ``equal``, ``differs``
(what, from `tests.census.compare`) or ``fails`` (which side, and its error).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tests.census.compare import differences
from tests.census.projects import Project

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Verdict:
    """A census row: ``result`` is ``equal``, ``differs`` or ``fails``; ``reason`` says why, if not equal."""

    result: str
    reason: str = ""


def run_record(project: Project, framework: str, timeout: float = 600) -> dict[str, Any]:
    """``project`` run under ``framework`` in a fresh subprocess and folder; its record."""
    with tempfile.TemporaryDirectory(prefix=f"census-{project.name}-{framework}-") as folder:
        out = Path(folder) / "record.pt"
        work = Path(folder) / "work"  # notebooks write to "../saved_models": still inside this run's folder
        work.mkdir()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               "PATH_DATASETS": folder, "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg"}
        done = subprocess.run([sys.executable, "-m", "tests.census.run_one", framework, project.name, str(out)],
                              cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
        if not out.is_file():
            return {"calls": [], "error": f"exit {done.returncode}: {done.stderr[-1500:]}",
                    "error_line": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
        return torch.load(out, weights_only=False)


def _error(record: dict[str, Any]) -> str:
    # the error's first line, without the terminal colours some libraries put in their messages
    return re.sub(r"\x1b\[[0-9;]*m", "", record.get("error_line") or record["error"]).strip()


def judge(theirs: dict[str, Any], ours: dict[str, Any]) -> Verdict:
    """The row for Lightning's record ``theirs`` and Lockstep's ``ours``."""
    if theirs["error"]:
        ours_outcome = f"Lockstep: {_error(ours)}" if ours["error"] else "Lockstep runs it"
        return Verdict("fails", f"under Lightning: {_error(theirs)} ({ours_outcome})")
    if ours["error"]:
        return Verdict("fails", f"Lockstep: {_error(ours)}")
    if not theirs["calls"]:
        return Verdict("fails", "the script made no trainer call")
    found = differences(theirs, ours)
    return Verdict("differs", "; ".join(found)) if found else Verdict("equal")


def census_row(project: Project) -> Verdict:
    """Run ``project`` on both frameworks and judge the pair."""
    return judge(run_record(project, "lightning"), run_record(project, "lockstep"))
