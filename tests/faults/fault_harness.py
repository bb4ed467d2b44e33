"""Run one fault case of ``fault_script.py`` under one launcher and describe how it ended.

``run_case`` launches it as a user does; ``run_forked`` runs it on two ranks forked by
``run_ranks``, for the failures that happen inside the Trainer.

The run starts in its own session (so its own process group) with a marker in its environment
that every process it starts inherits. A process of the run is one in that process group or
carrying the marker: torchrun starts its workers in sessions of their own, and a worker whose
launcher died is re-parented, but neither loses the marker. Whatever is left when the run is
over is recorded and then killed, so the suite never leaks processes.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import torch

from tests.faults import fault_script
from tests.helpers.distributed import REPO_ROOT, free_port, run_ranks
from trainer.checkpoint_io.file_format import load_checkpoint

SCRIPT = Path(__file__).resolve().parent / "fault_script.py"
MARKER_VAR = "LOCKSTEP_FAULT_RUN"
REPORT_VAR = "LOCKSTEP_FAULT_REPORT"  # a JSON-lines file: report.py collects one row per run

# Bounds, in seconds, far below torch's 30-minute collective timeout. Start-up (three
# interpreters importing torch) is slow on a busy 2-core machine, so reaching the fault gets
# most of the time; once the fault happened the run must be over quickly.
REACH_FAULT_S = 150.0
END_AFTER_FAULT_S = 30.0
# Cases where the test, not the script, injects the fault: a signal to the launcher.
LAUNCHER_SIGNALS = {"sigkill_launcher": signal.SIGKILL, "sigterm_launcher": signal.SIGTERM}
# After the launcher is gone its workers get this long to notice and exit.
LEFTOVER_GRACE_S = 10.0


@dataclasses.dataclass
class Outcome:
    case: str
    launcher: str
    returncode: int | None  # None: it never ended and was killed
    fault_injected: bool  # False: the run ended or stalled before it reached the fault
    output: str
    fault_to_end_s: float | None  # from the injected fault to the last process of the run gone
    total_s: float
    leftovers: list[str]  # "pid cmdline" of processes still alive after the grace period
    checkpoints: dict[str, Any]  # file name -> {"step": int, "finite": bool} or {"error": str}


def _run_env(marker: str) -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env[MARKER_VAR] = marker
    return env


def command(case: str, launcher: str, root: Path) -> list[str]:
    """The command line a user would type for ``launcher`` (torchrun as ``python -m``)."""
    script = [str(SCRIPT), case, launcher, str(root)]
    if launcher == "torchrun":
        return [
            sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--master-addr", "127.0.0.1", "--master-port", str(free_port()), *script,
        ]
    return [sys.executable, *script]


def run_processes(pgid: int, marker: str) -> dict[int, str]:
    """Live processes of the run: in process group ``pgid`` or with ``marker`` in their environment."""
    tag = f"{MARKER_VAR}={marker}".encode()
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if fields[0] in ("Z", "X"):  # dead, waiting to be reaped: nothing left running
                continue
            mine = int(fields[2]) == pgid
            if not mine:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    mine = tag in f.read().split(b"\0")
            if mine:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    found[pid] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
        except (OSError, ValueError, IndexError):  # it exited while we looked
            continue
    return found


def _kill_all(pgid: int, marker: str) -> None:
    for _ in range(50):
        alive = run_processes(pgid, marker)
        if not alive:
            return
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def _fault_time(root: Path) -> float | None:
    try:
        times = [float(t) for t in (root / "fault_at").read_text().split()]
    except (OSError, ValueError):
        return None
    return min(times) if times else None


def _checkpoints(root: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for path in sorted((root / "ckpts").glob("*.ckpt")):
        try:
            ckpt = load_checkpoint(path)
        except Exception as err:  # noqa: BLE001 - reported as the problem it is
            found[path.name] = {"error": f"{type(err).__name__}: {err}"}
            continue
        weights = [v for v in ckpt["state_dict"].values() if v.is_floating_point()]
        finite = all(bool(torch.isfinite(v).all()) for v in weights)
        found[path.name] = {"step": int(ckpt["global_step"]), "finite": finite}
    return found


def run_case(case: str, launcher: str, tmp_path: Path) -> Outcome:
    """Launch, inject ``case`` (the script does, except a launcher kill), wait for the end."""
    root = tmp_path / "run"
    root.mkdir()
    marker = uuid.uuid4().hex
    log_path = tmp_path / "output.txt"
    started = time.time()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command(case, launcher, root), env=_run_env(marker), cwd=str(REPO_ROOT),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    pgid = proc.pid
    end: float | None = None
    launcher_code: int | None = None
    leftovers: dict[int, str] = {}
    try:
        fault = None
        while proc.poll() is None and time.time() - started < REACH_FAULT_S:
            fault = _fault_time(root)
            if fault is not None:
                if case in LAUNCHER_SIGNALS:
                    proc.send_signal(LAUNCHER_SIGNALS[case])
                    fault = time.time()
                break
            time.sleep(0.05)
        fault = fault or _fault_time(root)
        deadline = (fault or time.time()) + END_AFTER_FAULT_S
        while proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        launcher_code = proc.poll()
        if launcher_code is not None:
            # The launcher is gone; the run is over when its last process is.
            grace = time.time() + LEFTOVER_GRACE_S
            while run_processes(pgid, marker) and time.time() < grace:
                time.sleep(0.05)
            end = time.time()
        leftovers = run_processes(pgid, marker)
        total = time.time() - started
    finally:
        _kill_all(pgid, marker)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return Outcome(
        case=case,
        launcher=launcher,
        returncode=launcher_code,
        fault_injected=fault is not None,
        output=log_path.read_text(errors="replace"),
        fault_to_end_s=None if end is None or leftovers or fault is None else round(end - fault, 1),
        total_s=round(total, 1),
        leftovers=[f"{pid} {cmd}" for pid, cmd in sorted(leftovers.items())],
        checkpoints=_checkpoints(root),
    )


def _forked_rank(rank: int, world_size: int, case: str, root: str, log_dir: str) -> None:
    """One rank of a ``forked`` case: the script's ``main`` in a rank that ``run_ranks`` forked,
    its output to ``log_dir/rank<N>.txt`` (a forked rank shares the fork server's stderr)."""
    log = os.open(os.path.join(log_dir, f"rank{rank}.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    os.dup2(log, 2)
    fault_script.main([case, "forked", root])


def run_forked(case: str, tmp_path: Path) -> Outcome:
    """Run ``case`` on two ranks forked by ``run_ranks`` (the torchrun variables, no launcher).

    For the cases whose failure happens inside the Trainer: with no launcher to stop them, every
    rank must end by itself within `END_AFTER_FAULT_S` of the fault. Its output is what each
    rank raised (with the notes the Trainer adds) and printed; the blamed rank is the one the
    other ranks' errors name."""
    root = tmp_path / "run"
    root.mkdir()
    started = time.time()
    try:
        run_ranks(_forked_rank, 2, args=(case, str(root), str(tmp_path)), init_group=False,
                  timeout=REACH_FAULT_S, failure_grace=END_AFTER_FAULT_S)
        returncode: int | None = 0
        report = ""
    except AssertionError as err:
        report = str(err)
        # run_ranks kills what is left once the grace is over, and says so.
        returncode = None if "timeout=" in report or "still running after another rank failed" in report else 1
    end = time.time()
    logs = "".join(f"--- rank {r} printed ---\n{(tmp_path / f'rank{r}.txt').read_text(errors='replace')}"
                   for r in range(2) if (tmp_path / f"rank{r}.txt").exists())
    fault = _fault_time(root)
    return Outcome(
        case=case,
        launcher="forked",
        returncode=returncode,
        fault_injected=fault is not None,
        output=report + "\n" + logs,
        fault_to_end_s=None if fault is None or returncode is None else round(end - fault, 1),
        total_s=round(end - started, 1),
        leftovers=[],  # run_ranks kills each rank's process group
        checkpoints=_checkpoints(root),
    )


def record(outcome: Outcome, problems: list[str]) -> None:
    """Append the run's row for report.py (when ``$LOCKSTEP_FAULT_REPORT`` names a file)."""
    path = os.environ.get(REPORT_VAR)
    if not path:
        return
    row = dataclasses.asdict(outcome)
    row.pop("output")
    row["problems"] = problems
    row["rank_named"] = blamed_rank(outcome.output, outcome.launcher)
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


# How each launcher names the worker it blames: our ElasticLauncher's summary line (not the
# workers' own "[rankN]: [lockstep] rank N failed at ..." lines), torchrun's "Root Cause" block. Under ddp_spawn torch.multiprocessing shows one process's traceback ("Process
# N terminated with the following error"), whichever it noticed first; the error at its end is what
# the user reads, so a `RankFailedError` there ("Rank 1 failed: ...") names the rank. Forked ranks
# have no launcher: the survivors' own errors name the rank.
_BLAME = {
    "python": re.compile(r"(?m)^\[lockstep\] worker rank (\d+) failed"),
    "torchrun": re.compile(r"Root Cause \(first observed failure\):.*?\brank\s*:\s*(\d+)", re.S),
    "spawn": re.compile(r"\b[Pp]rocess (\d+) terminated"),
    "forked": re.compile(r"(?:RankFailedError: Rank|Error: On rank) (\d+)\b"),
}
_RANK_FAILED = re.compile(r"RankFailedError: Rank (\d+) failed")


def blamed_rank(output: str, launcher: str) -> int | None:
    """The rank the launcher reports as the (first) failure, or None when it names none."""
    if launcher == "spawn":
        named = _RANK_FAILED.findall(output)
        if named:
            return int(named[-1])
    match = _BLAME[launcher].search(output)
    return int(match.group(1)) if match else None
