"""Who stopped answering: every rank's heartbeat in the rendezvous store.

Each rank of a multi-process group runs one daemon thread that writes, every `INTERVAL_S`, its
host, node and the time into the store, over a store connection of its own (the training
thread's is never shared). When a collective fails and no peer wrote why (it was killed, its
node lost power or its network), the surviving ranks read the heartbeats and name the peer that
went silent: ``rank 1 on host lsnode1 (node 1) stopped answering at ...; last heard 6.2 s
ago``. A store that cannot be read any more is named too: its host is the one that was lost.
Nothing runs on the training thread between failures.

Each beat also carries the rank's progress (`trainer.distributed.stall.CollectiveProgress`: the
collective it is in or finished last, its epoch, step and batch), and the thread answers a stall
announced by another rank by printing this process's stacks (`trainer.distributed.stall`).
"""
from __future__ import annotations

import datetime
import json
import socket
import threading
import time
from typing import Any

import torch.distributed as dist

from trainer.distributed.stall import CollectiveProgress, answer_stall

INTERVAL_S = 1.0
# A peer heard from longer ago than this is silent (a few beats missed, some scheduling slack).
SILENT_AFTER_S = 2.5 * INTERVAL_S
_KEY = "lockstep/alive/{}"


class Heartbeat:
    """Writes this rank's heartbeat (with ``progress``) into the store at ``host:port`` under
    ``prefix`` until `stop`."""

    def __init__(self, host: str, port: int, prefix: str, rank: int, node: int, progress: CollectiveProgress) -> None:
        self.rank = rank
        self._progress = progress
        self._record = {"rank": rank, "host": socket.gethostname(), "node": node}
        self._store = dist.PrefixStore(
            prefix, dist.TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=10))
        )
        self._stop = threading.Event()
        self._beat()
        self._thread = threading.Thread(target=self._run, name="lockstep-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        try:
            where = self._progress.position()
        except Exception:  # noqa: BLE001 - read from this thread while the run changes it
            where = ""
        record = {**self._record, **self._progress.record(), "where": where, "time": time.time()}
        self._store.set(_KEY.format(self.rank), json.dumps(record))

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            try:
                self._beat()
                answer_stall(self._store, self.rank, self._progress)
            except Exception:  # the store is gone: the training thread's collective says so
                return

    def stop(self) -> None:
        """End the thread (it writes nothing more)."""
        self._stop.set()
        self._thread.join(timeout=2 * INTERVAL_S)


def heartbeats(store: Any, rank: int, world_size: int) -> list[dict[str, Any]] | None:
    """The peers' last heartbeats, each with ``age`` in seconds, in rank order; None when the
    store cannot be read (it is gone with its host)."""
    now = time.time()
    beats = []
    try:
        for peer in range(world_size):
            if peer == rank or not store.check([_KEY.format(peer)]):
                continue
            record = json.loads(store.get(_KEY.format(peer)).decode())
            beats.append({**record, "age": now - float(record["time"])})
    except Exception:  # noqa: BLE001 - any failure to read means the store is unreachable
        return None
    return beats


def silent_peers(beats: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The heartbeats (from `heartbeats`) older than `SILENT_AFTER_S`, oldest first."""
    return sorted((b for b in beats if b["age"] > SILENT_AFTER_S), key=lambda b: -b["age"])
