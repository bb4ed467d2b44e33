"""Stalls: where each rank is among the group's collectives, and every rank's stack when one stalls.

Each rank counts the collectives its strategy and loops enter (`CollectiveProgress`): a few
attribute writes on the training thread per collective, no host sync, no extra collective. Its
heartbeat thread publishes that count and the rank's position with each beat
(`trainer.distributed.heartbeat`). When a collective times out on a rank, that rank prints the
stack of each of its threads and announces the stall in the rendezvous store (`announce_stall`);
every rank whose heartbeat sees the announcement prints its own stacks once (`answer_stall`), so
a rank whose training thread is stuck while its heartbeat still beats shows where it is stuck.
The stalled rank is then named: a silent one (frozen, partitioned) by its heartbeat's age, a live
one because it has not entered the collective the others wait in (`behind_peers`).
"""
from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import sys
import threading
import time
import traceback
from typing import Any, Callable, Iterator

STALL_KEY = "lockstep/stall"
# The announcements whose stacks this process printed already: the training thread (whose
# collective timed out) and the heartbeat thread (which sees the announcement) answer it once.
_printed: set[str] = set()
_printed_lock = threading.Lock()


class CollectiveProgress:
    """Which collective this rank's training thread is in or finished last, counted from 1.

    ``position`` returns the rank's place in the run (the Trainer's epoch, step and batch); the
    heartbeat thread calls it with each beat.
    """

    def __init__(self) -> None:
        self._count = 0
        # (count, name, inside, since): replaced as a whole, so the heartbeat thread reads one state
        self._state: tuple[int, str, bool, float] = (0, "", False, time.time())
        self.position: Callable[[], str] = str

    @contextlib.contextmanager
    def inside(self, name: str) -> Iterator[None]:
        """Count a collective ``name`` for the duration of the block.

        A block that raises leaves the state inside it: a collective that failed ends the run, and
        the failure names the collective it was in. A nested collective (a ``sync_dist`` reduce in
        a training step) counts on; leaving it returns to the outer one's name.
        """
        self._count += 1
        outer = self._state
        self._state = (self._count, name, True, time.time())
        yield
        self._state = (self._count, outer[1], True, outer[3]) if outer[2] else (self._count, name, False, time.time())

    def record(self) -> dict[str, Any]:
        """The state as the heartbeat publishes it: ``collective`` (the count), ``op``, ``inside``, ``since``."""
        count, name, inside, since = self._state
        return {"collective": count, "op": name, "inside": inside, "since": since}


def describe(record: dict[str, Any]) -> str:
    """``collective #12 (all_reduce)``, or ``no collective yet``."""
    return f"collective #{record['collective']} ({record['op']})" if record.get("collective") else "no collective yet"


def is_timeout(exc: BaseException) -> bool:
    """Whether a collective's error says it timed out (gloo's "Timed out waiting ...", NCCL's watchdog)."""
    text = str(exc).lower()
    return "timed out" in text or "timeout" in text


def print_stacks(header: str, announcement: str) -> None:
    """Write ``header`` and the stack of every thread of this process to stderr, once per announcement."""
    with _printed_lock:
        if announcement in _printed:
            return
        _printed.add(announcement)
        sys.stderr.write(header + "\n")
        sys.stderr.flush()  # faulthandler writes to the descriptor, past Python's buffer
        try:
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        except (AttributeError, ValueError, io.UnsupportedOperation):  # a stderr without a descriptor
            for ident, frame in sys._current_frames().items():
                sys.stderr.write(f"Thread 0x{ident:x}:\n{''.join(traceback.format_stack(frame))}")
        sys.stderr.flush()


def announce_stall(store: Any, rank: int, where: str, record: dict[str, Any]) -> None:
    """This rank's collective timed out: print its stacks and tell every rank through ``store``
    (None: it is gone); the first announcement in the group stands."""
    mine = json.dumps({"rank": rank, "where": where, "time": time.time(), **record})
    announcement = mine
    if store is not None:
        try:
            announcement = store.compare_set(STALL_KEY, "", mine).decode()
        except Exception:  # noqa: BLE001 - the store may be gone: this rank's stacks still print
            pass
    stalled = json.loads(announcement)
    print_stacks(
        f"[lockstep] rank {rank}: {describe(record)} timed out at {where}"
        + ("" if stalled["rank"] == rank else f" (rank {stalled['rank']} announced its own first)")
        + f"; the stack of every thread of rank {rank}:",
        announcement,
    )


def answer_stall(store: Any, rank: int, progress: CollectiveProgress) -> None:
    """If a rank announced a stall, print this process's stacks (once): for the heartbeat thread."""
    if not store.check([STALL_KEY]):
        return
    announcement = store.get(STALL_KEY).decode()
    stalled = json.loads(announcement)
    if announcement in _printed or stalled["rank"] == rank:  # the announcing rank printed its own
        return
    print_stacks(
        f"[lockstep] rank {rank}: rank {stalled['rank']}'s {describe(stalled)} timed out at {stalled['where']}; "
        f"rank {rank} is at {_position(progress)}, {_state(progress.record())}; the stack of every thread of rank {rank}:",
        announcement,
    )


def _position(progress: CollectiveProgress) -> str:
    try:
        return progress.position() or "an unknown position"
    except Exception:  # noqa: BLE001 - read from another thread while the run changes it
        return "an unknown position"


def _state(record: dict[str, Any]) -> str:
    return f"in {describe(record)}" if record.get("inside") else f"after {describe(record)}"


def behind_peers(heartbeats: list[dict[str, Any]], mine: dict[str, Any]) -> list[dict[str, Any]]:
    """The live peers that have not entered the collective this rank (``mine``) is in, or has
    finished last: their count is lower. Furthest behind first."""
    behind = [h for h in heartbeats if int(h.get("collective", 0)) < int(mine.get("collective", 0))]
    return sorted(behind, key=lambda h: (int(h.get("collective", 0)), int(h["rank"])))


def stalled_message(peer: dict[str, Any], rank: int, where: str, mine: dict[str, Any], others: list[int]) -> str:
    """The error naming ``peer``, a live rank behind the collective this rank waited in (``mine``,
    with ``failed``: when it timed out)."""
    if mine.get("inside"):
        mine_state = f"waited {float(mine['failed']) - float(mine['since']):.1f} s in {describe(mine)}"
    else:
        mine_state = f"had finished {describe(mine)}"
    also = f" Ranks {', '.join(map(str, others))} are behind too." if others else ""
    return (
        f"Rank {peer['rank']} on host {peer['host']} (node {peer['node']}) stalled at {peer.get('where') or 'an unknown position'}: "
        f"its heartbeat is live (last {peer['age']:.1f} s ago) but it is {_state(peer)}, while rank {rank} "
        f"{mine_state} at {where}: rank {peer['rank']} never reached that collective, so rank {rank}'s timed "
        f"out. Its stack is in its log.{also}"
    )
