"""A 2-worker run launched by `python` (Trainer(devices=2)) for the launcher tests in
tests/launch/test_launch_lifecycle.py: what happens when the launcher is interrupted, workers print.

    --mode train | print

- ``train``: trains slowly for a long time, checkpointing every 2 steps under ``$OUT/ckpts``; each
  worker appends ``pid=<pid>`` to ``$OUT/pids.txt`` once training runs, then ``READY`` lines
  follow on stdout (the test then kills or interrupts the launcher).
- ``print``: in ``setup`` every rank prints ``--lines`` lines of ``--width`` characters with
  plain ``print`` (``R<rank> <i> xxxx...``).

A rank failing is tests/scripts/ddp_fit.py's ``--fail-rank``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from callbacks import ModelCheckpoint
from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import DDPStrategy, Trainer

OUT = os.environ.get("LOCKSTEP_TEST_OUT", ".")


class Model(Regression):
    def __init__(self, mode: str, lines: int, width: int) -> None:
        super().__init__("sgd")
        self.mode, self.lines, self.width = mode, lines, width

    def setup(self, stage: str) -> None:
        if self.mode == "print":
            tag = f"R{self.global_rank}"
            for i in range(self.lines):
                print(tag, i, (tag.lower() * self.width)[: self.width])

    def on_train_start(self) -> None:
        if self.mode == "train":
            with open(os.path.join(OUT, "pids.txt"), "a") as f:
                f.write(f"pid={os.getpid()}\n")

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.mode == "train":
            time.sleep(0.05)
        return super().training_step(batch, batch_idx)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", required=True)
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--width", type=int, default=1000)
    args = parser.parse_args()
    callbacks = []
    if args.mode == "train":
        callbacks.append(ModelCheckpoint(dirpath=os.path.join(OUT, "ckpts"), every_n_train_steps=2, save_top_k=-1))
    options = {**QUIET, "enable_checkpointing": bool(callbacks), "default_root_dir": OUT}
    trainer = Trainer(
        max_epochs=1000 if args.mode == "train" else 2, devices=2, accelerator="cpu", strategy=DDPStrategy(timeout=60),
        callbacks=callbacks, **options,
    )
    trainer.fit(Model(args.mode, args.lines, args.width), loader(regression_data(32), 4))
    sys.stdout.write(f"END rank={trainer.global_rank}\n")


if __name__ == "__main__":
    main()
