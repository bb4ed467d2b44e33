"""What a worker process started by the Trainer's own launcher sets up first.

- It dies with its launcher: a launcher killed with SIGKILL cannot stop its workers, which would
  go on training (and writing checkpoints) as orphans. On Linux the kernel sends the worker
  SIGKILL when its parent dies (``PR_SET_PDEATHSIG``); a thread polling the parent's pid does
  the same everywhere else, and covers a parent that died before this process armed.
- Its stdout and stderr are line-buffered: the workers share the launcher's terminal or pipe, and
  an unbuffered ``print`` writes the text and the newline apart, so lines of two ranks interleave
  mid-line. One ``write`` per line (up to the pipe's atomic size, 4 KiB on Linux) never does.
- Ctrl-C prints no traceback: the launcher reports the interrupt once for the whole run.

A worker of torch's own elastic agent (torchrun) only dies with the agent
(`die_with_elastic_agent`, armed when the Trainer joins the process group).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import TracebackType

# Set by `ElasticLauncher` for the workers it starts: the launcher's pid.
LAUNCHER_PID_ENV = "LOCKSTEP_LAUNCHER_PID"
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_PARENT_POLL_S = 0.5
_KILL = getattr(signal, "SIGKILL", signal.SIGTERM)  # Windows has no SIGKILL


def adopt_launcher(launcher_pid: int) -> None:
    """Make this process a well-behaved worker of the launcher ``launcher_pid`` (its parent)."""
    _line_buffered_output()
    _quiet_keyboard_interrupt()
    _die_with_parent(launcher_pid)


def adopt_launcher_from_env() -> None:
    """In a worker started by `ElasticLauncher`, `adopt_launcher`; elsewhere nothing.

    The variable is removed so that processes this worker starts (which have another parent)
    do not take the worker's launcher for theirs.
    """
    pid = os.environ.pop(LAUNCHER_PID_ENV, None)
    if pid is not None and pid.isdigit():
        adopt_launcher(int(pid))


def die_with_elastic_agent() -> None:
    """In a worker started by torch's elastic agent (torchrun), die with the agent, its parent.

    torch's agent starts its workers in sessions of their own and arms nothing, so a SIGKILLed
    torchrun would leave them training as orphans. The agent outlives its restarts of the worker
    group, so a restarted worker dies with it too. A worker of `Trainer(devices=N)`, whose agent
    runs in the launching process, armed this already when it imported Lockstep.
    """
    if "TORCHELASTIC_RUN_ID" in os.environ and not _armed:
        _die_with_parent(os.getppid())


def _line_buffered_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(line_buffering=True, write_through=False)
            except (ValueError, OSError):  # a replaced or closed stream: leave it
                pass


def _quiet_keyboard_interrupt() -> None:
    previous = sys.excepthook

    def excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if not issubclass(kind, KeyboardInterrupt):
            previous(kind, value, tb)

    sys.excepthook = excepthook


_armed = False  # whether this process already dies with its parent


def _die_with_parent(parent_pid: int) -> None:
    global _armed
    if _armed:
        return
    _armed = True
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(_KILL), 0, 0, 0)
        except (OSError, AttributeError):  # no prctl (e.g. a static libc): the thread still watches
            pass
    if os.getppid() != parent_pid:  # the launcher died before the kernel was told
        os.kill(os.getpid(), _KILL)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="lockstep-parent-watch", daemon=True).start()


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(_PARENT_POLL_S)
    os.kill(os.getpid(), _KILL)
