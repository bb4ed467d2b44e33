"""Naming the rank that failed: a note in the rendezvous store that the other ranks read."""
from __future__ import annotations

import time
from typing import Any

_FAILURE_KEY = "lockstep/failure"
_PEER_NOTE_WAIT_S = 3.0


class RankFailedError(RuntimeError):
    """Another rank failed, so this rank's collective could not complete."""


def _looks_like_peer_loss(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return any(w in text for w in ("connection", "timed out", "timeout", "closed", "reset by peer", "distbackend", "gloo", "nccl"))


def read_failure_note(store: Any) -> tuple[int, str] | None:
    try:
        if not store.check([_FAILURE_KEY]):
            return None
        rank, _, text = store.get(_FAILURE_KEY).decode().partition("|")
        return int(rank), text
    except Exception:
        return None


def explain_failure(store: Any, rank: int, exc: BaseException) -> BaseException | None:
    """A `RankFailedError` naming the peer that failed first, or None when this rank was first.

    The first rank to fail writes its error to the store before it leaves the group; a rank
    whose collective then breaks finds that note (waiting briefly when its error looks like a
    lost peer) and reports *that* rank's error instead of an anonymous "connection closed".
    """
    deadline = time.monotonic() + (_PEER_NOTE_WAIT_S if _looks_like_peer_loss(exc) else 0.0)
    while True:
        note = read_failure_note(store)
        if note is not None:
            failed, text = note
            if failed == rank:
                return None
            return RankFailedError(
                f"Rank {failed} failed: {text}. Rank {rank} stopped because the collective "
                "it was waiting in could not complete without that rank."
            )
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    try:
        store.set(_FAILURE_KEY, f"{rank}|{type(exc).__name__}: {exc}".splitlines()[0][:2000])
    except Exception:  # the store may be gone with the rank that hosted it
        pass
    return None
