"""Naming the rank that failed: notes in the rendezvous store that the other ranks read.

A rank's failure is either its own (an error in the model, the data, a callback: the root cause)
or a *consequence* of another rank's failure: a collective that broke or timed out because a
peer did not take part, or an error that is about a peer (every rank raises the
`NonFiniteLossError` the save-time check agreed on, naming the rank whose loss it was). Every failing rank writes a note (rank, kind, wall time, where it was, the
error) before it leaves the group. A rank whose collective broke waits briefly for a peer's own
failure and then raises `RankFailedError` naming that peer, its step and batch, and its error.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import time
import traceback
from typing import Any

import torch

from trainer.contracts.errors import NonFiniteLossError
from trainer.distributed.stall import announce_stall, behind_peers, describe, is_timeout, stalled_message

_COUNT_KEY = "lockstep/failures"
_NOTE_KEY = "lockstep/failure/{}"
_PEER_NOTE_WAIT_S = 3.0
_STORE_CHECK_S = 5.0
# After naming the peer that failed, a rank leaves a little later than that peer, so a launcher
# that reports the first worker to exit (torch's elastic agent, torch.multiprocessing.spawn)
# reports the peer with its own traceback, not this rank's broken collective.
_DEFER_EXIT_S = 1.0
# Where a collective's error is raised from: torch itself, or this package's own calls of it.
_COLLECTIVE_CALLERS = tuple(os.path.dirname(os.path.abspath(f)) + os.sep for f in (torch.__file__, __file__))
# What a collective that lost its peer raises (gloo, NCCL, the store, torch's wrappers).
_COLLECTIVE_WORDS = (
    "connection closed", "connection reset", "reset by peer", "broken pipe", "timed out", "timeout",
    "gloo", "nccl", "socket", "closed by peer", "network", "store",
)


class RankFailedError(RuntimeError):
    """Another rank failed, so this rank's collective could not complete.

    Attributes: ``rank`` (the rank that failed), ``where`` (its epoch, step and batch) and
    ``cause`` (its error as ``"Type: message"``).
    """

    def __init__(self, message: str, rank: int = -1, where: str = "", cause: str = "") -> None:
        super().__init__(message)
        self.rank, self.where, self.cause = rank, where, cause

    def __reduce__(self) -> Any:  # picklable with its fields (spawned workers hand errors back)
        return (type(self), (str(self), self.rank, self.where, self.cause))


def is_collective_failure(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by a collective (or the store), not by the rank's own code.

    torch raises these as ``DistError`` subclasses, or as a plain ``RuntimeError`` (gloo) from
    torch's code or from this package's ``work.wait()``; a user's own ``TimeoutError`` or
    ``RuntimeError("timeout")`` raised in its own code is the rank's own failure.
    """
    dist_error = getattr(torch.distributed, "DistError", None)
    if dist_error is not None and isinstance(exc, dist_error):
        return True
    if type(exc) is not RuntimeError:
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    inner = os.path.abspath(frames[-1].filename) if frames else ""
    text = str(exc).lower()
    return inner.startswith(_COLLECTIVE_CALLERS) and any(w in text for w in _COLLECTIVE_WORDS)


def reaches_every_rank(exc: BaseException) -> bool:
    """Whether ``exc`` is an interrupt or an exit (Ctrl-C, a pre-emption), not a failure to explain.

    Anything else is a failure, also a `BaseException` that is no `Exception` (torch's
    ``CheckpointException`` is one).
    """
    return isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit))


def is_consequence(exc: BaseException, rank: int) -> bool:
    """Whether ``exc`` on ``rank`` follows from another rank's failure, not from this rank's own.

    A broken collective (`is_collective_failure`), a `RankFailedError`, or an error about another
    rank (a `NonFiniteLossError` whose ``rank`` is a peer's).
    """
    return isinstance(exc, RankFailedError) or _about_peer(exc, rank) or is_collective_failure(exc)


def _about_peer(exc: BaseException, rank: int) -> bool:
    return isinstance(exc, NonFiniteLossError) and exc.rank is not None and exc.rank != rank


def read_failure_notes(store: Any) -> list[dict[str, Any]]:
    """Every note written so far, first failure first."""
    try:
        count = int(store.add(_COUNT_KEY, 0))
        notes = [json.loads(store.get(_NOTE_KEY.format(i)).decode()) for i in range(count)]
    except Exception:  # the store may be gone with the rank that hosted it
        return []
    return sorted(notes, key=lambda n: (n["time"], n["rank"]))


def _write_note(store: Any, rank: int, own: bool, where: str, exc: BaseException | None, text: str = "") -> None:
    if exc is not None:
        text = f"{type(exc).__name__}: {exc}".splitlines()[0][:2000] if str(exc) else type(exc).__name__
    note = {"rank": rank, "own": own, "time": time.time(), "where": where, "error": text}
    try:
        # Numbered by the store's counter: notes of ranks failing at once never overwrite each other.
        index = int(store.add(_COUNT_KEY, 1)) - 1
        store.set(_NOTE_KEY.format(index), json.dumps(note))
    except Exception:  # the store may be gone with the rank that hosted it
        pass


def note_early_exit(store: Any, rank: int, where: str, exc: SystemExit) -> None:
    """Leave the note of a rank that calls ``sys.exit`` in the middle of a run (even with 0)."""
    _write_note(store, rank, True, where, None, f"it called sys.exit({exc.code!r}) before the run ended")


def explain_failure(
    store: Any, rank: int, world_size: int, exc: BaseException, where: str, store_address: str = "",
    progress: dict[str, Any] | None = None,
) -> BaseException | None:
    """A `RankFailedError` naming the peer whose own failure came first, or None to raise ``exc``.

    ``where`` is this rank's position (``"epoch 0, global step 3, batch index 3"``), ``progress``
    the collective it is in (`trainer.distributed.stall.CollectiveProgress.record`). A rank
    failing on its own writes its note and raises its error. A rank whose collective broke waits
    up to a few seconds (or until every peer has written a note) for a peer's own failure;
    without one it asks the peers' heartbeats (`trainer.distributed.heartbeat`): a peer gone
    silent (killed, frozen, its node or network lost) is named, and so is the store's host
    (``store_address``) when the store cannot be read. A collective that timed out is a stall:
    this rank prints its stacks and announces it, so every rank that can run prints its own, and
    a live peer that never reached this rank's collective is named as the stalled rank.
    """
    if _about_peer(exc, rank):  # its message already names that rank, which writes its own note
        _write_note(store, rank, False, where, exc)
        return None
    own = not is_collective_failure(exc)
    if own:
        _write_note(store, rank, True, where, exc)
        return None
    answers = _store_answers(store)
    stall = _announce_if_stalled(store if answers else None, rank, where, exc, progress)
    if not answers:
        lost = _store_lost(rank, where, store_address)
        # The elastic agent of this node loses the same store and may kill this worker any
        # moment: say it now, not only in the traceback at the end.
        print(f"[lockstep] rank {rank}: {lost}", file=sys.stderr, flush=True)
        return lost
    notes = _wait_for_notes(store, rank, world_size)
    peers = [n for n in notes if n["own"]]
    if peers:
        _write_note(store, rank, False, where, exc)
        return _named_peer(peers[0], rank, where)
    silent = _lost(store, rank, world_size, where, store_address, stall) if len({n["rank"] for n in notes}) < world_size - 1 else None
    if silent is not None:
        _write_note(store, rank, False, where, exc)
        return silent
    if notes and hasattr(exc, "add_note"):  # Python >= 3.11: shown under the traceback
        exc.add_note(
            f"[lockstep] rank {notes[0]['rank']} had already stopped at {notes[0]['where']} because its "
            f"collective failed ({notes[0]['error'][:200]}): a rank that never reaches a collective "
            "(stalled, or on another code path) makes the others' collectives time out."
        )
    _write_note(store, rank, False, where, exc)
    return None


def _announce_if_stalled(
    store: Any, rank: int, where: str, exc: BaseException, progress: dict[str, Any] | None
) -> dict[str, Any] | None:
    """A collective that timed out is a stall: announce it (`announce_stall`) and return this
    rank's collective, with ``failed`` (when); None for a collective that broke otherwise."""
    if progress is None or not is_timeout(exc):
        return None
    stall = {**progress, "failed": time.time()}
    announce_stall(store, rank, where, stall)
    return stall


def _wait_for_notes(store: Any, rank: int, world_size: int) -> list[dict[str, Any]]:
    """The peers' notes once one of them failed on its own, or after the wait, earliest first."""
    deadline = time.monotonic() + _PEER_NOTE_WAIT_S
    while True:
        notes = [n for n in read_failure_notes(store) if n["rank"] != rank]
        if any(n["own"] for n in notes):
            return notes
        if time.monotonic() >= deadline or len({n["rank"] for n in notes}) == world_size - 1:
            return notes  # waited long enough, or every peer has already said why it stopped
        time.sleep(0.05)


def _named_peer(first: dict[str, Any], rank: int, where: str) -> RankFailedError:
    """The error naming the peer whose own failure stopped this rank, said before the agent's kill."""
    named = RankFailedError(
        f"Rank {first['rank']} failed at {first['where']}: {first['error']}. Rank {rank} stopped "
        f"(at {where}) because the collective it was waiting in could not complete without that rank.",
        rank=first["rank"],
        where=first["where"],
        cause=first["error"],
    )
    # The agent usually stops this rank during the deferred exit, before any excepthook:
    # the one line that says why it stopped must be out by then.
    if agent_reports_failures():
        say_stopped(rank, named)
    time.sleep(_DEFER_EXIT_S)
    return named


def _lost(
    store: Any, rank: int, world_size: int, where: str, store_address: str, stall: dict[str, Any] | None
) -> RankFailedError | None:
    """A `RankFailedError` naming the peer (or the store's host) that stopped answering, or the
    live peer that stalled behind this rank's timed-out collective (``stall``); or None."""
    from trainer.distributed.heartbeat import heartbeats, silent_peers

    beats = heartbeats(store, rank, world_size)
    if beats is None:
        return _store_lost(rank, where, store_address)
    silent = silent_peers(beats)
    if silent:
        first = silent[0]
        waited_in = f" ({describe(stall)})" if stall is not None else ""
        return RankFailedError(
            f"Rank {first['rank']} on host {first['host']} (node {first['node']}) stopped answering at {where}; "
            f"last heard {first['age']:.1f} s ago. Rank {rank} stopped because the collective it was waiting "
            f"in{waited_in} could not complete without that rank.",
            rank=int(first["rank"]), where=where, cause="stopped answering",
        )
    behind = behind_peers(beats, stall) if stall is not None else []
    if not behind:
        return None
    return RankFailedError(
        stalled_message(behind[0], rank, where, stall or {}, [int(b["rank"]) for b in behind[1:]]),
        rank=int(behind[0]["rank"]), where=str(behind[0].get("where", "")), cause="stalled",
    )


def _store_answers(store: Any) -> bool:
    """Whether the store answers within a few seconds (not the group's timeout: it may be gone)."""
    try:
        store.set_timeout(datetime.timedelta(seconds=_STORE_CHECK_S))
        store.add(_COUNT_KEY, 0)
    except Exception:  # noqa: BLE001 - any failure: the store's host is unreachable
        return False
    return True


def _store_lost(rank: int, where: str, store_address: str) -> RankFailedError:
    return RankFailedError(
        f"The rendezvous store at {store_address or 'MASTER_ADDR:MASTER_PORT'} stopped answering: the host "
        f"that serves it (the store host, node 0) was lost, or its network. Rank {rank} stopped at {where}.",
        rank=-1, where=where, cause="store lost",
    )


def record_for_elastic_agent(exc: BaseException, rank: int) -> None:
    """Under torch's elastic agent, write the traceback where the agent reports it from."""
    if "TORCHELASTIC_ERROR_FILE" not in os.environ or reaches_every_rank(exc):
        return
    # torch's ErrorHandler.record_exception writes the traceback of the exception being handled,
    # which for a RankFailedError is the broken collective's, not the error it reports: write
    # the same file (torch's documented format) with ``exc``'s own traceback and cause.
    callstack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    info: dict[str, str | bool] = {"py_callstack": callstack, "timestamp": str(int(time.time()))}
    # For the Trainer's launcher: a broken collective or an error about a peer is a consequence,
    # the rank's own error a cause.
    info["lockstep_consequence"] = is_consequence(exc, rank)
    data = {"message": {"message": f"{type(exc).__name__}: {exc}", "extraInfo": info}}
    try:
        with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
            json.dump(data, f)
    except Exception:  # the original exception matters more than its report
        return
    _leave_traceback_to_agent(exc, rank, bool(info["lockstep_consequence"]))


def agent_reports_failures() -> bool:
    """Whether this worker's elastic agent reports a failure of it now, with the error file's traceback.

    That is torchrun's "Root Cause" table and the Trainer's own launcher's report; both appear
    once the agent gives up. An agent with restarts left restarts the group instead, logging no
    more than the exit code, so there the worker prints its traceback itself.
    """
    if not os.environ.get("TORCHELASTIC_ERROR_FILE"):
        return False
    try:
        restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        allowed = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0"))
    except ValueError:
        return False
    return restarts >= allowed


# The exception this worker's error file holds, and whether the rank's one line about it is out.
_recorded: BaseException | None = None
_recorded_rank = -1
_recorded_consequence = False
_said: BaseException | None = None
_hook_installed = False


def say_stopped(rank: int, exc: BaseException) -> None:
    """One line on this rank's stderr: it stopped because of another rank's failure (``exc``)."""
    global _said
    _said = exc
    text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    sys.stderr.write(f"[rank{rank}]: [lockstep] rank {rank} stopped: {text}\n")
    sys.stderr.flush()


def _leave_traceback_to_agent(exc: BaseException, rank: int, consequence: bool) -> None:
    """Have Python's excepthook not print ``exc`` when the agent will print its traceback.

    Otherwise a one-line bug on one rank shows its traceback twice: once from the worker (torch's
    ``[rankN]:``-prefixed excepthook) and once from the agent's report of the error file. The
    agent's copy is the one kept: it also reaches the console when torchrun redirects the
    workers' output to files, and it comes last, under the agent's own lines. A rank that stopped
    because of another rank's failure prints one line saying so instead of its broken collective.
    """
    global _recorded, _recorded_rank, _recorded_consequence, _hook_installed
    _recorded, _recorded_rank, _recorded_consequence = exc, rank, consequence
    if _hook_installed:
        return
    _hook_installed = True
    previous = sys.excepthook

    def excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if value is not _recorded or not agent_reports_failures():
            previous(kind, value, tb)
        elif _recorded_consequence and _said is not value:
            say_stopped(_recorded_rank, value)

    sys.excepthook = excepthook
