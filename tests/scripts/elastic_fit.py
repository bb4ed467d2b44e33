"""An elastic run for tests/multinode/test_elastic.py, launched with ``torchrun --nnodes=MIN:MAX``.

`Regression` (tests/helpers/models.py) on 45 shuffled samples, micro batch 2,
``Trainer(global_batch_size=12)`` (A = 12 / (2 W): 2 on three nodes, 3 on two), 2 epochs, a
checkpoint every optimizer step (every K with ``--every K``).

    --root DIR  --mode straight | leave | join | fail  [--step S]  [--strategy ddp | fsdp]  [--global-batch G]
    [--every K]  [--reference]

- ``leave``: the rank on host ``lsnode2`` writes ``<root>/holding`` after global step S and waits
  (at most 120 s) for the test to cut its node's power;
- ``join``: global rank 0 writes ``<root>/ready`` after global step S (once per root) and waits
  (at most 120 s) for the agents to stop the workers, as they do when a node joins;
- ``fail``: global rank 1 of the first attempt (``TORCHELASTIC_RESTART_COUNT=0``) raises after
  global step S (its checkpoint saved), for the agent to restart the workers;
- ``--reference``: one process with the global batch (a loader of batch 12, no accumulation).

A run that resumed (a restart) writes, on global rank 0, ``<root>/resumed.json`` at its first
optimizer step: that step, the step it resumed from and the time (one clock for every node
of the namespace cluster), for the test to measure the time from a node's loss to the next step.

Each rank saves its final (whole) parameters, ``global_step``, world size and accumulation with
`save_rank_result`.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from callbacks import Callback, ModelCheckpoint  # noqa: E402
from tests.helpers.distributed import save_rank_result  # noqa: E402
from tests.helpers.models import Regression, loader, params_of, regression_data  # noqa: E402
from trainer import Trainer  # noqa: E402

SAMPLES, MICRO_BATCH, GLOBAL_BATCH = 45, 2, 12


class Model(Regression):
    def on_train_end(self) -> None:
        # under FSDP each rank holds shards: gather the whole parameters while the group exists
        self.final_params = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in params_of(self)]


class Interrupt(Callback):
    """Holds one rank after global step ``step`` (see the module's docstring)."""

    def __init__(self, mode: str, step: int, root: str) -> None:
        self.mode, self.step, self.root = mode, step, root
        self.stopping = False
        self.start_step = 0

    def on_train_start(self, trainer: Any, module: Any) -> None:
        self.start_step = trainer.global_step

    def _wait_for_sigterm(self) -> None:
        previous = signal.getsignal(signal.SIGTERM)  # Lockstep's pre-emption handler, installed by now

        def note(signum: int, frame: Any) -> None:  # the agents stop the workers: end the wait
            self.stopping = True
            signal.signal(signal.SIGTERM, previous)
            if callable(previous):
                previous(signum, frame)

        signal.signal(signal.SIGTERM, note)
        deadline = time.monotonic() + 120
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(0.1)

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        resumed = Path(self.root, "resumed.json")
        if trainer.global_rank == 0 and self.start_step and trainer.global_step > self.start_step and not resumed.exists():
            resumed.write_text(json.dumps({"time": time.time(), "step": trainer.global_step, "from": self.start_step}))
        if trainer.global_step != self.step or trainer.fit_loop.batches_done % trainer.accumulate_grad_batches:
            return
        if self.mode == "leave" and socket.gethostname() == "lsnode2":
            Path(self.root, "holding").touch()
            time.sleep(120)
        elif self.mode == "fail" and trainer.global_rank == 1 and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
            raise RuntimeError(f"planned failure after global step {self.step}")
        elif self.mode == "join" and trainer.global_rank == 0 and not Path(self.root, "ready").exists():
            Path(self.root, "ready").touch()
            self._wait_for_sigterm()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--mode", default="straight", choices=["straight", "leave", "join", "fail"])
    parser.add_argument("--step", type=int, default=3)
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--global-batch", type=int, default=GLOBAL_BATCH)
    parser.add_argument("--every", type=int, default=1)
    parser.add_argument("--reference", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)  # the shuffled order's seed
    module = Model("sgd")
    quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    if args.reference:
        trainer = Trainer(accelerator="cpu", devices=1, max_epochs=2, enable_checkpointing=False, **quiet)
        trainer.fit(module, loader(regression_data(SAMPLES), GLOBAL_BATCH, shuffle=True))
    else:
        checkpoints = ModelCheckpoint(dirpath=os.path.join(args.root, "ckpts"), every_n_train_steps=args.every,
                                      every_n_epochs=0, save_last=True, save_top_k=0)
        trainer = Trainer(accelerator="cpu", strategy=args.strategy, max_epochs=2, global_batch_size=args.global_batch,
                          callbacks=[checkpoints, Interrupt(args.mode, args.step, args.root)],
                          default_root_dir=args.root, **quiet)
        trainer.fit(module, loader(regression_data(SAMPLES), MICRO_BATCH, shuffle=True))
    save_rank_result({"params": module.final_params, "global_step": trainer.global_step,
                      "world_size": trainer.world_size, "accumulate": trainer.accumulate_grad_batches})


if __name__ == "__main__":
    main()
