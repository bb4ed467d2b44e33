"""Starting the worker processes when the user ran ``python script.py`` with ``devices > 1``.

`ElasticLauncher` hands the script to torch's elastic agent (what ``torchrun`` runs), so workers
are supervised exactly as under torchrun; the launching process then exits with the workers'
status instead of running the rest of the script a second time. `SpawnLauncher` uses
``torch.multiprocessing.spawn`` (``strategy="ddp_spawn"``) for notebooks and pickled modules,
and copies rank 0's trained weights back into the launching process.
"""
from __future__ import annotations

import io
import os
import pickle
import signal
import socket
import sys
import tempfile
import threading
import types
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from trainer.contracts.protocols import CheckpointCallbackView
from trainer.launch.preemption import (
    PREEMPTION_EXIT_CODE,
    PREEMPTION_NOTES_ENV,
    PREEMPTION_SIGNALS,
    read_launcher_notes,
)
from trainer.launch.worker_process import LAUNCHER_PID_ENV, adopt_launcher

if TYPE_CHECKING:
    from trainer.contracts.internals import TrainerInternals as Trainer


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ElasticLauncher:
    """Re-runs ``sys.argv`` in ``nproc_per_node`` workers under torch's elastic agent."""

    def __init__(self, nproc_per_node: int, num_nodes: int = 1, max_restarts: int = 0) -> None:
        self.nproc_per_node = nproc_per_node
        self.num_nodes = num_nodes
        self.max_restarts = max_restarts

    def _rendezvous(self) -> tuple[str, str, dict[str, Any], str]:
        """Where and how the nodes' agents meet: ``(endpoint, backend, configs, run_id)``."""
        if self.num_nodes == 1:
            return f"127.0.0.1:{_free_port()}", "c10d", {}, f"lockstep-{uuid.uuid4().hex[:8]}"
        for var in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK"):
            if var not in os.environ:
                raise RuntimeError(
                    f"Trainer(num_nodes={self.num_nodes}) launched with plain `python` needs "
                    f"MASTER_ADDR, MASTER_PORT and NODE_RANK on every node; {var} is not set. "
                    "Or launch with torchrun / srun."
                )
        endpoint = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        # The same on every node: the agents meet under this id (a random one per node
        # would keep them waiting for each other forever).
        run_id = f"lockstep-{os.environ['MASTER_PORT']}"
        return endpoint, "static", {"rank": int(os.environ["NODE_RANK"])}, run_id

    def launch(self, trainer: Trainer, fn: str, args: tuple[Any, ...]) -> NoReturn:
        """Run the workers to completion, then exit this process with their status."""
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.launcher.api import LaunchConfig, elastic_launch

        _require_script(self.nproc_per_node)
        endpoint, backend, configs, run_id = self._rendezvous()
        config = LaunchConfig(
            min_nodes=self.num_nodes,
            max_nodes=self.num_nodes,
            nproc_per_node=self.nproc_per_node,
            run_id=run_id,
            rdzv_endpoint=endpoint,
            rdzv_backend=backend,
            rdzv_configs=configs,
            max_restarts=self.max_restarts,
            monitor_interval=0.1,
            start_method="spawn",
        )
        from torch.distributed.elastic.multiprocessing.api import SignalException

        os.environ[LAUNCHER_PID_ENV] = str(os.getpid())  # the workers die with this process
        # gloo's and the store's C++ warnings when a peer goes away ("recvValue failed ...
        # Connection reset by peer", with C++ frames) bury the failing rank's error. c10 reads
        # the level once, when a worker loads torch, so it can only be set for the workers here.
        quiet_cpp = "TORCH_CPP_LOG_LEVEL" not in os.environ
        if quiet_cpp:
            os.environ["TORCH_CPP_LOG_LEVEL"] = "ERROR"
        notes = tempfile.TemporaryDirectory(prefix="lockstep-notes-")
        os.environ[PREEMPTION_NOTES_ENV] = notes.name
        # SLURM's pre-emption signal reaches the workers themselves, which save and exit 75; its
        # default action would end this process first, and its workers with it (a handler, not
        # SIG_IGN, which the workers would inherit).
        usr1 = getattr(signal, "SIGUSR1", None)
        on_main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(usr1, _ignore) if usr1 and on_main_thread else None
        try:
            elastic_launch(config, entrypoint=sys.executable)(*_worker_args())
        except ChildFailedError as err:
            sys.exit(_report_failed_workers(err.failures))
        except (SignalException, KeyboardInterrupt) as err:
            # The agent has already passed the signal on to the workers and waited for them.
            signum = getattr(err, "sigval", signal.SIGINT)
            preempted = read_launcher_notes(notes.name)
            if preempted is not None:  # they were training: they saved and exited 75
                by = signal.Signals(preempted.signum).name
                _say(
                    f"[lockstep] Stopped by {signal.Signals(signum).name}: the workers saved "
                    f"{preempted.path} (pre-empted by {by}); exit code {PREEMPTION_EXIT_CODE}."
                )
                sys.exit(PREEMPTION_EXIT_CODE)
            _say(
                f"[lockstep] Stopped by {signal.Signals(signum).name}: the workers were stopped too "
                f"(exit code {128 + signum})."
            )
            sys.exit(128 + signum)
        finally:
            os.environ.pop(LAUNCHER_PID_ENV, None)
            os.environ.pop(PREEMPTION_NOTES_ENV, None)
            if quiet_cpp:
                os.environ.pop("TORCH_CPP_LOG_LEVEL", None)
            notes.cleanup()
            if usr1 is not None and previous is not None:
                signal.signal(usr1, previous)
        sys.exit(0)


def _require_script(nproc_per_node: int) -> None:
    """Fail unless this process runs a script file, which the workers re-run."""
    script = sys.argv[0] if sys.argv else ""
    if not script or script == "-c" or not os.path.isfile(script):
        raise RuntimeError(
            f"Trainer(devices={nproc_per_node}) starts its workers by re-running your script, but "
            f"this process was not started from a script file (sys.argv[0]={script!r}). In a notebook "
            "or an interactive session use strategy='ddp_spawn', or launch with torchrun."
        )


def _ignore(signum: int, frame: Any) -> None:
    pass


def _say(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _failure_text(failure: Any) -> str:
    message = failure.message
    return message.get("message", "") if isinstance(message, dict) else str(message)


def _extra_info(failure: Any) -> dict[str, Any]:
    """What the worker's error file adds to the message (`trainer.launch.failure_notes`)."""
    info = failure.error_file_data.get("message", {})
    return info.get("extraInfo", {}) if isinstance(info, dict) else {}


def _callstack(failure: Any) -> str:
    return str(_extra_info(failure).get("py_callstack") or "").rstrip()


def _priority(failure: Any) -> int:
    """0 for a worker's own error, 1 killed from outside, 2 SIGTERM, 3 another rank's consequence."""
    info = _extra_info(failure)
    if "py_callstack" not in info:
        # Ended by a signal or without a report. The agent stops the survivors of a failure
        # with SIGTERM: that one is the teardown's doing, any other signal came first.
        return 2 if failure.exitcode == -signal.SIGTERM else 1
    if info.get("lockstep_consequence") or _failure_text(failure).startswith("RankFailedError"):
        return 3  # the consequence of another rank's failure
    return 0  # the worker's own error


def _report_failed_workers(failures: dict[int, Any]) -> int:
    """Report the root cause of a failed run once, with its traceback; return the exit code.

    torch's agent names the worker with the earliest failure time, in whole seconds, so a rank
    that only stopped because its peer failed is often named instead of the peer. Here a
    worker's own error comes first, then a worker ended by a signal other than SIGTERM (killed
    from outside: no Python code was left to report), then one ended by SIGTERM (usually the
    agent's own, stopping the survivors of a failure), then a consequence of another rank's
    failure (a broken collective, a ``RankFailedError``, an error about another rank); among
    equals the earliest, then the lowest rank.
    """
    codes = {f.exitcode for f in failures.values()}
    if PREEMPTION_EXIT_CODE in codes and codes <= {PREEMPTION_EXIT_CODE, -signal.SIGTERM}:
        # Rank 0 said what it saved, and where; the agent may have stopped a slower rank itself.
        _say(f"[lockstep] The run was pre-empted: exit code {PREEMPTION_EXIT_CODE}.")
        return PREEMPTION_EXIT_CODE

    # By _priority, then the earliest: a rank killed from outside is seen at once, while its
    # peers' collectives report their break seconds later (they wait for a note the killed rank
    # never writes).
    order = sorted(failures, key=lambda r: (_priority(failures[r]), failures[r].timestamp, r))
    root = failures[order[0]]
    lines = [f"[lockstep] worker rank {order[0]} failed with exit code {root.exitcode}: {_failure_text(root)}"]
    if _callstack(root):
        lines.append(_callstack(root))
    for rank in order[1:]:
        failure = failures[rank]
        first = _failure_text(failure).splitlines()[0] if _failure_text(failure) else ""
        if failure.exitcode == -signal.SIGTERM and _priority(failure) == 2 and _priority(root) == 0:
            first = f"stopped by the launcher (SIGTERM) after worker rank {order[0]} failed"
        lines.append(f"[lockstep] worker rank {rank} also stopped (exit code {failure.exitcode}): {first}")
        # The worker left its traceback to this report (`trainer.launch.failure_notes`): a
        # second rank's own error, or a collective that timed out, is shown here or nowhere.
        if "Traceback (most recent call last)" in _callstack(failure):
            lines.append(_callstack(failure))
    _say("\n".join(lines))
    return root.exitcode if root.exitcode > 0 else 1


def _worker_args() -> list[str]:
    """The interpreter arguments that re-run this program in a worker.

    ``python -m pkg.train`` must stay ``-m pkg.train``: re-running the module's file as a script
    would break its relative imports (``from .model import Net``). Not ``-u``: unbuffered output
    writes a line's text and newline apart, so two workers' lines interleave; the workers make
    their output line-buffered instead (`trainer.launch.worker_process`).
    """
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        name = spec.name[: -len(".__main__")] if spec.name.endswith(".__main__") else spec.name
        return ["-m", name, *sys.argv[1:]]
    return list(sys.argv)


class SpawnLauncher:
    """Runs the Trainer's entry point in ``nprocs`` processes made by ``torch.multiprocessing``."""

    def __init__(self, nprocs: int) -> None:
        self.nprocs = nprocs

    def launch(self, trainer: Trainer, fn: str, args: tuple[Any, ...]) -> Any:
        """Run ``trainer.<fn>(*args)`` on every rank; return rank 0's result here."""
        import torch.multiprocessing as mp

        port = _free_port()
        # Pickled here with plain pickle, not by torch.multiprocessing: its pickler hands CPU
        # tensors over as *shared memory*, so every worker would update the same parameter
        # storage (W optimizer steps applied to one model) and the launching process's tensors
        # would be moved to shared memory. Plain pickle gives each worker its own copy.
        payload = _pickle_for_workers((trainer, fn, args))
        with tempfile.TemporaryDirectory(prefix="lockstep-spawn-") as out:
            context = mp.start_processes(
                _spawned_worker,
                args=(payload, port, self.nprocs, out, os.getpid()),
                nprocs=self.nprocs,
                start_method="spawn",
                join=False,
            )
            _join_forwarding_preemption(context, out)
            outcome = torch.load(Path(out) / "rank0.pt", weights_only=False)
        trainer.adopt_spawned_run(args[0] if args else None, outcome)
        _restore_callback_states(trainer, outcome["callbacks"])
        return outcome["result"]


def _join_forwarding_preemption(context: Any, notes: str) -> None:
    """Wait for the spawned workers; pass a pre-emption signal sent to this process on to them.

    Without this, SIGTERM to the launching process (``kill PID``, a scheduler) would end it at
    once, and its workers with it, unsaved. The workers save and exit 75; then this process
    raises `Preempted` (exit code 75 when uncaught), as every rank does.
    """
    import torch.multiprocessing as mp

    received: list[int] = []

    def forward(signum: int, frame: Any) -> None:
        received.append(signum)
        for process in context.processes:
            if process.is_alive():  # never signal a reaped worker's pid: it may be reused
                try:
                    os.kill(process.pid, signum)
                except ProcessLookupError:  # it exited just now
                    pass

    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, forward) for sig in PREEMPTION_SIGNALS} if on_main_thread else {}
    try:
        while not context.join():
            pass
    except (mp.ProcessExitedException, mp.ProcessRaisedException) as err:
        preempted = read_launcher_notes(notes)
        if preempted is None:
            if received:  # stopped before any worker could save: end as the signal would have
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
                previous = {}
                signal.raise_signal(received[0])
            raise
        _say(
            f"[lockstep] The run was pre-empted by {signal.Signals(preempted.signum).name}: the workers "
            f"saved {preempted.path}; exit code {PREEMPTION_EXIT_CODE}."
        )
        raise preempted from err
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _restore_callback_states(trainer: Trainer, states: dict[str, Any]) -> None:
    """Give the launching process's callbacks rank 0's final state (e.g. ``best_model_path``,
    so ``trainer.test(ckpt_path="best")`` works after a spawned fit)."""
    for cb in trainer.callbacks:
        state = states.get(cb.state_key)
        if state is None:
            continue
        if isinstance(cb, CheckpointCallbackView) and cb.dirpath is None and state.get("dirpath") is not None:
            # The worker resolved the default directory; a callback that ran in this process
            # would hold it too (and restores its paths only when the directory matches).
            cb.dirpath = state["dirpath"]
        cb.load_state_dict(state)


class _RecordingPickler(pickle.Pickler):
    """A plain pickler that notes the classes and functions it pickles by reference to ``__main__``."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.from_main: list[str] = []

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (type, types.FunctionType)) and getattr(obj, "__module__", None) == "__main__":
            if obj.__qualname__ not in self.from_main:
                self.from_main.append(obj.__qualname__)
        return NotImplemented  # pickle it the usual way


def _pickle_for_workers(obj: Any) -> bytes:
    """``obj`` pickled for the spawned workers, or a clear error if they could not unpickle it.

    Spawned workers start a fresh interpreter that finds classes by module and name. A script's
    ``__main__`` is re-imported there, but a notebook's or ``python -c``'s has no file, so a
    ``TrainModule`` defined in a notebook cell would fail in every worker with an obscure
    ``AttributeError``.
    """
    buffer = io.BytesIO()
    pickler = _RecordingPickler(buffer)
    pickler.dump(obj)
    main = sys.modules.get("__main__")
    if pickler.from_main and not getattr(main, "__file__", None):
        raise RuntimeError(
            "strategy='ddp_spawn' runs the Trainer in new Python processes, which must import every "
            f"class and function it is given, but {', '.join(pickler.from_main)} "
            f"{'is' if len(pickler.from_main) == 1 else 'are'} defined in this interactive session "
            "(a notebook or `python -c`), which they cannot import. Move "
            f"{'it' if len(pickler.from_main) == 1 else 'them'} into a .py file next to the notebook "
            "and import from there, or run a script (python script.py, torchrun)."
        )
    return buffer.getvalue()


def _spawned_worker(rank: int, payload: bytes, port: int, nprocs: int, out: str, launcher_pid: int) -> None:
    adopt_launcher(launcher_pid)
    os.environ[PREEMPTION_NOTES_ENV] = out
    trainer, fn, args = pickle.loads(payload)
    os.environ.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(nprocs),
            "LOCAL_WORLD_SIZE": str(nprocs),
            "GROUP_RANK": "0",
        }
    )
    from trainer.distributed.cluster_environment import detect_cluster_environment

    strategy = trainer.strategy
    strategy.connect(
        strategy.accelerator,
        detect_cluster_environment(),
        sync_batchnorm=strategy.sync_batchnorm,
        use_distributed_sampler=strategy.use_distributed_sampler,
        precision=strategy.precision,
    )
    result = getattr(trainer, fn)(*args)
    if rank == 0:
        module = trainer.module
        torch.save(
            {
                "state_dict": {k: v.cpu() for k, v in module.state_dict().items()},
                "progress": trainer.fit_loop.progress.state_dict(),
                "callback_metrics": {k: v.cpu() for k, v in trainer.callback_metrics.items()},
                "logged_metrics": trainer.logged_metrics,
                "callbacks": {cb.state_key: cb.state_dict() for cb in trainer.callbacks},
                "result": result,
            },
            Path(out) / "rank0.pt",
        )
