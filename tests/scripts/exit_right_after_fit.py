"""Launched by tests/launch/test_ddp_launch.py: a script whose last statement is ``trainer.fit``.

At ``on_train_end`` (before the Trainer's final barrier) every thread of this process is pinned to
one CPU and torch's gloo worker threads are moved to the idle scheduling class, so they run only
when the main thread waits. After the final collective the main thread then runs straight into
interpreter shutdown while a gloo worker thread still has to release that collective's work,
which may free a Python tensor and so needs the GIL. Unless the process waits for those threads
at exit, it aborts ("terminate called without an active exception", exit code -6) after a
successful run. ``$NO_WAIT=1`` skips the wait (to see the abort).
"""
import os

import torch
import torch.distributed as dist

from tests.helpers.distributed import save_rank_result
from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import Trainer


class StarvedWorkers(Regression):
    def on_train_end(self) -> None:
        cpu = sorted(os.sched_getaffinity(0))[self.global_rank % len(os.sched_getaffinity(0))]
        for tid in map(int, os.listdir("/proc/self/task")):
            try:
                os.sched_setaffinity(tid, {cpu})
                with open(f"/proc/self/task/{tid}/comm") as f:
                    if f.read().startswith("pt_gloo"):
                        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            except OSError:  # the thread ended meanwhile
                pass
        if os.environ.get("NO_WAIT") == "1":
            import trainer.strategies.process_group as process_group

            process_group._GROUPS_JOINED.clear()
        save_rank_result({"global_step": self.global_step, "cpu": cpu})
        # An asynchronous collective still in flight at the Trainer's final barrier (the
        # pre-emption check's can be), whose tensor only the collective's work still holds.
        flag = torch.ones(1)
        work = dist.all_reduce(flag, async_op=True)
        del flag, work



Trainer(accelerator="cpu", max_epochs=1, **QUIET).fit(StarvedWorkers("sgd"), loader(regression_data(16), 4))
