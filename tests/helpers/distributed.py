"""The one helper every distributed test uses: real processes, gloo on 127.0.0.1, hard timeouts.

- ``run_ranks(fn, ...)`` runs a top-level function in ``world_size`` new processes (forked from a
  server that imported torch once) and returns each rank's return value in rank order.
- ``run_script(args, ...)`` launches a script the way users do (``torchrun`` or plain ``python``).
  Scripts report results with ``save_rank_result`` and the test reads them with
  ``read_rank_results``.

A failing rank turns into an ``AssertionError`` with that rank's number and traceback; a hang is
killed at ``timeout`` so the suite never stalls.
"""
from __future__ import annotations

import datetime
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from math import inf
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from multiprocessing import forkserver

REPO_ROOT = Path(__file__).resolve().parents[2]
OUT_ENV_VAR = "LOCKSTEP_TEST_OUT"

# Another test (or engineer) may grab the port between `free_port` and the bind in rank 0.
_PORT_RETRIES = 3
# What the fork server imports once, before it forks any rank. torch._dynamo too: torch imports
# it lazily on the first optimizer a process builds (`Optimizer.add_param_group` is wrapped in
# `torch._disable_dynamo`), which costs a fresh process about 2.5 s of CPU, more than torch itself.
_PRELOAD = ("torch", "torch._dynamo", "torch.distributed", "trainer", "callbacks", "tests.helpers.models")
# Once one rank has failed the others usually block in a collective; give them this long to
# report their own error before they are killed.
_FAILURE_GRACE_S = 3.0


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ----------------------------------------------------------------------------------------------
# run_ranks
# ----------------------------------------------------------------------------------------------
def _rank_env(rank: int, world_size: int, port: int) -> dict[str, str]:
    return {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        "OMP_NUM_THREADS": "1",
    }


def _rank_main(
    fn: Callable[..., Any],
    rank: int,
    world_size: int,
    args: tuple[Any, ...],
    port: int,
    out_dir: str,
    init_group: bool,
    backend: str,
    timeout: float,
    parent_env: dict[str, str],
) -> None:
    # Own process group, so the parent can kill this rank together with anything it started
    # (DataLoader workers, nested launches).
    os.setpgrp()
    # The fork server's environment is the one of the first launch: take the caller's of now.
    os.environ.clear()
    os.environ.update(parent_env)
    os.environ.update(_rank_env(rank, world_size, port))
    torch.set_num_threads(1)
    result_path = os.path.join(out_dir, f"rank{rank}.pt")
    phase = "init"
    try:
        if init_group:
            dist.init_process_group(
                backend,
                rank=rank,
                world_size=world_size,
                timeout=datetime.timedelta(seconds=timeout),
            )
        phase = "run"
        value = fn(rank, world_size, *args)
        outcome: tuple[str, Any, float] = ("ok", value, time.time())
    except BaseException:  # noqa: B036 - report everything, including SystemExit
        outcome = (f"{phase}_error", traceback.format_exc(), time.time())
    finally:
        # Also a group the code under test joined itself and left behind.
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # a crashed peer can make tear-down fail; the outcome matters more
                pass
    try:
        torch.save(outcome, result_path + ".tmp")
    except Exception:  # the return value could not be pickled
        torch.save(("run_error", traceback.format_exc(), time.time()), result_path + ".tmp")
    os.replace(result_path + ".tmp", result_path)


def _rank_context() -> Any:
    """Ranks fork from a server process that imported torch and the trainer once (per test
    process): a launch then costs two forks instead of two interpreters importing torch, which
    takes seconds on a busy 2-core machine. Forked from that clean server, not from pytest, so a
    rank starts as fresh as a spawned one (no CUDA, no threads, no test state)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(_PRELOAD))
    # The server's sys.path is a fresh `python -c`'s (multiprocessing passes the parent's but does not
    # apply it), whose '' is the test's own working directory: without the checkout on PYTHONPATH
    # it would import another `tests` (a library's stray namespace package, e.g. pytorch-forecasting's)
    # and every rank forked from it would fail to unpickle its function.
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), saved) if p)
    try:
        forkserver.ensure_running()
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
    return ctx


def _kill_group(proc: Any) -> None:
    if proc.pid is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the rank had not reached os.setpgrp() yet
    proc.kill()
    proc.join(5)


def _read_outcome(out_dir: str, rank: int) -> tuple[str, Any, float] | None:
    path = os.path.join(out_dir, f"rank{rank}.pt")
    if not os.path.exists(path):
        return None
    return torch.load(path, weights_only=False)


def _launch_once(
    fn: Callable[..., Any],
    world_size: int,
    args: tuple[Any, ...],
    timeout: float,
    backend: str,
    init_group: bool,
    failure_grace: float,
) -> tuple[str, Any]:
    """One launch. Returns ("ok", values), ("port_in_use", None) or raises AssertionError."""
    ctx = _rank_context()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="lockstep_ranks_") as out_dir:
        procs = [
            ctx.Process(
                target=_rank_main,
                args=(fn, rank, world_size, args, port, out_dir, init_group, backend, timeout, dict(os.environ)),
                name=f"rank{rank}",
            )
            for rank in range(world_size)
        ]
        try:
            for proc in procs:
                proc.start()
            deadline = time.monotonic() + timeout
            outcomes: list[tuple[str, Any, float] | None] = [None] * world_size
            failed_at: float | None = None
            while True:
                for rank, proc in enumerate(procs):
                    if outcomes[rank] is None and not proc.is_alive():
                        outcomes[rank] = _read_outcome(out_dir, rank) or ("died", None, time.time())
                if all(o is not None for o in outcomes):
                    break
                now = time.monotonic()
                if failed_at is None and any(o is not None and o[0] != "ok" for o in outcomes):
                    failed_at = now
                if failed_at is not None and now - failed_at > failure_grace:
                    break
                if now > deadline:
                    hung = [r for r, o in enumerate(outcomes) if o is None]
                    finished = [r for r, o in enumerate(outcomes) if o is not None]
                    for proc in procs:
                        _kill_group(proc)
                    raise AssertionError(
                        f"run_ranks({getattr(fn, '__name__', fn)!r}): rank(s) {hung} did not "
                        f"finish within timeout={timeout}s and were killed (finished: {finished}). "
                        "Look for a collective that not every rank reaches."
                    )
                time.sleep(0.05)
        finally:
            for proc in procs:
                if proc.is_alive():
                    _kill_group(proc)

    errors = []
    for rank, (proc, outcome) in enumerate(zip(procs, outcomes)):
        if outcome is None:
            errors.append((rank, "", "still running after another rank failed; killed", inf))
        elif outcome[0] == "died":
            errors.append((
                rank, "",
                f"exited with code {proc.exitcode} without a result (e.g. it could not import the "
                "test module, or crashed hard); see the captured stderr",
                outcome[2],
            ))
        elif outcome[0] != "ok":
            errors.append((rank, outcome[0], outcome[1], outcome[2]))
    if not errors:
        return "ok", [outcome[1] for outcome in outcomes]  # type: ignore[index]
    # The only socket a rank binds to a chosen port is the rendezvous store on MASTER_PORT, made
    # either here (init_group=True) or by the Trainer under test: either way, retry on a new port.
    if any(
        kind in ("init_error", "run_error") and "address already in use" in str(text).lower()
        for _, kind, text, _ in errors
    ):
        return "port_in_use", None
    # The rank that failed first is the cause; later failures are usually peers noticing it
    # ("Connection closed by peer"), so they are listed after it.
    errors.sort(key=lambda e: (e[3], e[0]))
    report = "\n".join(f"--- rank {rank} ---\n{text}" for rank, _, text, _ in errors)
    raise AssertionError(
        f"run_ranks({getattr(fn, '__name__', fn)!r}): rank {errors[0][0]} failed.\n{report}"
    )


def run_ranks(
    fn: Callable[..., Any],
    world_size: int = 2,
    args: Sequence[Any] = (),
    timeout: float = 90,
    backend: str = "gloo",
    init_group: bool = True,
    failure_grace: float = _FAILURE_GRACE_S,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` new processes; return values in
    rank order.

    Each process gets ``MASTER_ADDR=127.0.0.1``, a free ``MASTER_PORT``, ``RANK``, ``LOCAL_RANK``,
    ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE`` and ``OMP_NUM_THREADS=1``. With ``init_group=True`` the
    default process group (``backend``) is initialised before ``fn`` and destroyed after it; with
    ``False`` only the variables are set, so the code under test joins the group itself.

    ``fn`` must be a top-level (picklable) function and return picklable values. A rank that
    raises becomes an ``AssertionError`` naming the rank with its traceback; ranks still running
    after ``timeout`` seconds are killed and the test fails. Once a rank has failed, the others get
    ``failure_grace`` seconds to end by themselves (a test of what a survivor says gives it longer).
    """
    if world_size < 1:
        raise ValueError(f"run_ranks: world_size must be >= 1, got {world_size}.")
    try:
        pickle.dumps(fn)
    except Exception as err:
        raise TypeError(
            f"run_ranks: fn={fn!r} cannot be pickled for the rank processes ({err}). "
            "Define it as a top-level function in the test module (no lambda or closure)."
        ) from err
    for _ in range(_PORT_RETRIES):
        status, values = _launch_once(fn, world_size, tuple(args), timeout, backend, init_group, failure_grace)
        if status == "ok":
            return values
    raise AssertionError(
        f"run_ranks: the master port was taken by another process {_PORT_RETRIES} times in a row."
    )


# ----------------------------------------------------------------------------------------------
# run_script
# ----------------------------------------------------------------------------------------------
def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (Linux /proc), children before grandchildren."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: fields start after the last ')'.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(0), [])
        found.extend(kids)
        todo.extend(kids)
    return found


def _stop_tree(proc: subprocess.Popen) -> None:
    # torchrun starts each worker in its own session, so killing the agent's process group is
    # not enough: note the whole tree first, ask the agent to stop its workers, then kill all.
    tree = descendants(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass
    kill_all([proc.pid, *tree])
    proc.wait()


def kill_all(pids: list[int]) -> None:
    """SIGKILL each of ``pids`` that is still there."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def script_env(env: dict[str, str] | None) -> dict[str, str]:
    """The environment a test script runs in: one thread, the checkout importable."""
    full = dict(os.environ)
    full["OMP_NUM_THREADS"] = "1"
    # Scripts import the project from the checkout even when it is not pip-installed, and the
    # test helpers the one way the tests do (`from tests.helpers.distributed import ...`).
    full["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), full.get("PYTHONPATH", "")) if p)
    full.update(env or {})
    return full


def run_script(
    args: list[str],
    launcher: str = "torchrun",
    nproc: int = 2,
    nnodes: int = 1,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    cwd: str | os.PathLike[str] | None = None,
    torchrun_args: Sequence[str] = (),
    rendezvous: str = "static",
) -> subprocess.CompletedProcess:
    """Run ``args`` (a script path and its arguments) as users launch it; capture its output.

    ``rendezvous="c10d"`` has the agents meet through torch's dynamic rendezvous on ``127.0.0.1``
    instead (what multi-node elastic jobs use: an agent restarting its workers makes the other
    agents restart theirs).

    ``torchrun_args`` are extra launcher options (e.g. ``["--max-restarts", "1"]``).

    ``launcher="torchrun"`` runs ``python -m torch.distributed.run --nproc_per_node nproc`` with a
    static rendezvous on ``127.0.0.1`` and a free port; ``nnodes=2`` starts two agents on this
    machine (``--node_rank 0`` and ``1``) and waits for both. ``launcher="python"`` runs
    ``python script ...`` once (``nproc`` is ignored). ``env`` is added to the current environment (plus
    ``OMP_NUM_THREADS=1`` and the repo on ``PYTHONPATH``). On timeout every process started is
    killed and ``subprocess.TimeoutExpired`` is raised. With two nodes the result's ``stdout`` and
    ``stderr`` hold both agents' output under ``=== node N ===`` headers, and ``returncode`` is
    the first non-zero one.
    """
    if launcher not in ("torchrun", "python"):
        raise ValueError(f"run_script: launcher must be 'torchrun' or 'python', got {launcher!r}.")
    if launcher == "python" and nnodes != 1:
        raise ValueError("run_script: launcher='python' starts one process on one node; drop nnodes.")
    if nproc < 1 or nnodes < 1:
        raise ValueError(f"run_script: nproc and nnodes must be >= 1, got {nproc}, {nnodes}.")
    if launcher == "python":
        commands = [[sys.executable, *args]]
    else:
        port = free_port()

        def meeting(node: int) -> list[str]:
            if rendezvous == "c10d":
                return ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"test-{port}"]
            return ["--node_rank", str(node), "--master_addr", "127.0.0.1", "--master_port", str(port)]

        commands = [
            [
                sys.executable, "-m", "torch.distributed.run",
                "--nnodes", str(nnodes), "--nproc_per_node", str(nproc), *meeting(node), *torchrun_args,
                *args,
            ]
            for node in range(nnodes)
        ]
    full_env = script_env(env)
    procs = [
        subprocess.Popen(
            cmd, env=full_env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True,
        )
        for cmd in commands
    ]
    outputs: list[tuple[str, str]] = []
    deadline = time.monotonic() + timeout
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=max(deadline - time.monotonic(), 0.1)))
    except subprocess.TimeoutExpired as err:
        for proc in procs:
            if proc.poll() is None:
                _stop_tree(proc)
        raise subprocess.TimeoutExpired(commands[0], timeout, err.output, err.stderr) from None
    finally:
        for proc in procs:
            if proc.poll() is None:
                _stop_tree(proc)
    codes = [proc.returncode for proc in procs]
    if len(procs) == 1:
        stdout, stderr = outputs[0]
    else:
        stdout = "".join(f"=== node {n} ===\n{out}" for n, (out, _) in enumerate(outputs))
        stderr = "".join(f"=== node {n} ===\n{err}" for n, (_, err) in enumerate(outputs))
    code = next((c for c in codes if c != 0), 0)
    return subprocess.CompletedProcess(commands[0], code, stdout, stderr)


def save_rank_result(value: Any, rank: int | None = None, subdir: str = "") -> None:
    """For scripts under test: save ``value`` as ``rank{R}.pt`` into ``$LOCKSTEP_TEST_OUT``
    (or its ``subdir``, made if missing)."""
    out_dir = os.environ.get(OUT_ENV_VAR)
    if not out_dir:
        raise RuntimeError(f"save_rank_result: set {OUT_ENV_VAR} to the directory for results.")
    rank = int(os.environ.get("RANK", "0")) if rank is None else rank
    path = Path(out_dir) / subdir / f"rank{rank}.pt"
    path.parent.mkdir(exist_ok=True)
    torch.save(value, str(path) + ".tmp")
    os.replace(str(path) + ".tmp", path)


def read_rank_results(out_dir: str | os.PathLike[str]) -> list[Any]:
    """Load the ``rank{R}.pt`` files a script wrote into ``out_dir``, in rank order.

    Fails if the ranks found are not exactly ``0..N-1`` (a rank that crashed wrote nothing).
    """
    files = {int(p.stem[4:]): p for p in Path(out_dir).glob("rank*.pt") if p.stem[4:].isdigit()}
    if sorted(files) != list(range(len(files))) or not files:
        raise AssertionError(
            f"read_rank_results: expected rank0.pt..rank{{N-1}}.pt in {out_dir}, "
            f"found ranks {sorted(files)}; a rank probably failed before saving."
        )
    return [torch.load(files[r], weights_only=False) for r in range(len(files))]
