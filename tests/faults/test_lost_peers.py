"""Naming what was lost: a rank killed (SIGKILL) or leaving with ``sys.exit(0)`` in the middle of
a fit is named by the surviving rank (rank, host, node, position, how long ago it was heard),
within the failure wait, long before the process-group timeout. Two real gloo ranks each."""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

import pytest
import torch

from callbacks import Callback
from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import DDPStrategy, Trainer

GROUP_TIMEOUT_S = 30  # a survivor that is not told waits this long in its collective
pytestmark = [pytest.mark.distributed, pytest.mark.timeout(4 * GROUP_TIMEOUT_S + 30)]


class _LeaveAt(Callback):
    def __init__(self, how):
        self.how = how

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_rank == 1 and trainer.global_step == 3:
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            sys.exit(0)


def _run(rank, world_size, out, how):
    torch.set_num_threads(1)
    trainer = Trainer(max_steps=50, accelerator="cpu", strategy=DDPStrategy(timeout=GROUP_TIMEOUT_S),
                      callbacks=[_LeaveAt(how)], **QUIET)
    started = time.monotonic()
    try:
        trainer.fit(Regression(), loader(regression_data(), 4))
        outcome = ("no error", "")
    except Exception as err:  # noqa: BLE001 - the test reads what the survivor said
        outcome = (type(err).__name__, str(err))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"kind": outcome[0], "text": outcome[1], "seconds": time.monotonic() - started}, f)


def _survivor(tmp_path, how):
    try:
        # rank 0 must outlive rank 1 long enough to say what it saw, however loaded the machine
        run_ranks(_run, world_size=2, args=(str(tmp_path), how), init_group=False, timeout=4 * GROUP_TIMEOUT_S,
                  failure_grace=4 * GROUP_TIMEOUT_S)
    except AssertionError as err:  # rank 1 died or left: the harness says so
        assert "rank 1" in str(err) or "rank(s) [1]" in str(err), str(err)[-2000:]
    return json.loads((tmp_path / "rank0.json").read_text())


def test_a_killed_rank_is_named_with_its_host_and_node(tmp_path):
    said = _survivor(tmp_path, "kill")
    assert said["kind"] == "RankFailedError", said
    host = socket.gethostname()
    assert f"Rank 1 on host {host} (node 0) stopped answering at epoch 0, global step 3" in said["text"], said
    assert "last heard" in said["text"] and "Rank 0 stopped because" in said["text"]
    print(f"killed rank named after {said['seconds']:.1f} s (group timeout {GROUP_TIMEOUT_S} s)")


def test_a_rank_that_calls_sys_exit_0_mid_fit_is_named(tmp_path):
    said = _survivor(tmp_path, "exit")
    assert said["kind"] == "RankFailedError", said
    assert "Rank 1 failed at epoch 0, global step 3" in said["text"], said
    assert "it called sys.exit(0) before the run ended" in said["text"], said
    print(f"exiting rank named after {said['seconds']:.1f} s (group timeout {GROUP_TIMEOUT_S} s)")
