"""A 2-rank training run that tests interrupt: pre-emption signals, a killed worker, a raising rank.

    --mode straight | preempt | kill | raise | hold | stop     --root DIR     [--resume last]     [--rank R]
    [--num-nodes N]  (Lockstep's own launcher on each node: one worker there, N nodes in all)
    [--timeout S]  (the process group's timeout: ``DDPStrategy(timeout=S)``)
Rank R (default 1) is interrupted; ``kill`` kills it once per ``--root`` (a marker file there),
whatever node it is on; ``hold`` makes it write ``<root>/holding`` and wait (at most 120 s) in
its training thread, for a test to kill its node or to watch the others time out; ``stop``
freezes the whole process (SIGSTOP: its heartbeat too). Each rank saves its final parameters, its global step and the step
its training started from with `save_rank_result`.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from callbacks import Callback, ModelCheckpoint  # noqa: E402
from tests.helpers.distributed import save_rank_result  # noqa: E402
from tests.helpers.resume_models import Noisy, make_loader  # noqa: E402
from trainer import DDPStrategy, Trainer, seed_everything  # noqa: E402


class Interrupt(Callback):
    def __init__(self, mode: str, step: int, rank: int, marker: str) -> None:
        self.mode, self.step, self.rank, self.marker = mode, step, rank, marker
        self.start_step = None

    def on_train_start(self, trainer, module):
        self.start_step = trainer.global_step  # where a resumed run starts

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_rank != self.rank or trainer.global_step != self.step:
            return
        if trainer.fit_loop.batches_done % trainer.accumulate_grad_batches:
            return
        if self.mode == "preempt":
            os.kill(os.getpid(), signal.SIGTERM)
        elif self.mode == "kill" and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.mode == "raise":
            raise RuntimeError("boom on rank 1")
        elif self.mode == "hold":
            open(os.path.join(os.path.dirname(self.marker), "holding"), "w").close()
            time.sleep(120)
        elif self.mode == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="straight")
    parser.add_argument("--root", required=True)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--step", type=int, default=7)
    parser.add_argument("--rank", type=int, default=1)
    parser.add_argument("--num-nodes", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=None)
    args = parser.parse_args()
    options: dict = {} if args.num_nodes is None else {"devices": 1, "num_nodes": args.num_nodes}
    if args.timeout is not None:
        options["strategy"] = DDPStrategy(timeout=args.timeout)
    torch.set_num_threads(1)
    seed_everything(0)
    module = Noisy()
    callbacks = [ModelCheckpoint(dirpath=os.path.join(args.root, "ckpts"), every_n_train_steps=2, every_n_epochs=0, save_last=True, save_top_k=0)]
    interrupt = Interrupt(args.mode, args.step, args.rank, os.path.join(args.root, "killed"))
    if args.resume is None:
        callbacks.append(interrupt)
    trainer = Trainer(accelerator="cpu",
        max_epochs=2, accumulate_grad_batches=2, callbacks=callbacks, default_root_dir=args.root,
        logger=False, enable_progress_bar=False, **options,
    )
    trainer.fit(module, make_loader(), ckpt_path=args.resume)
    save_rank_result({"params": [p.detach().clone() for p in module.parameters()], "step": trainer.global_step,
                      "start_step": interrupt.start_step})


if __name__ == "__main__":
    main()
