"""One run in a shared root directory, for the run-identity tests: ``--fail`` makes the run's
first attempt (restart count 0) fail before it saves anything, in ``prepare_data`` or at global
step 1; a restart (torchrun's, or a SLURM requeue) then trains. Global rank 0 prints one JSON
line: the step training started from, the log directory, the last checkpoint and the final step.

    run_identity.py --root DIR [--fail none|prepare_data|step] [--steps N]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from callbacks import Callback  # noqa: E402
from tests.helpers.models import Regression, loader, regression_data  # noqa: E402
from trainer import Trainer  # noqa: E402
from trainer.contracts.run_identity import attempt  # noqa: E402


class Failing(Regression):
    def __init__(self, fail: str = "none") -> None:
        super().__init__()
        self.fail = fail

    def prepare_data(self) -> None:
        if self.fail == "prepare_data" and attempt() == 0:
            raise RuntimeError("planned failure in prepare_data")

    def training_step(self, batch, batch_idx):
        if self.fail == "step" and attempt() == 0 and self.global_step == 1:
            raise RuntimeError("planned failure at step 1")
        return super().training_step(batch, batch_idx)


class StartStep(Callback):
    def on_train_start(self, trainer, module):
        self.step = trainer.global_step


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--fail", default="none", choices=("none", "prepare_data", "step"))
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)
    start = StartStep()
    trainer = Trainer(max_steps=args.steps, default_root_dir=args.root, accelerator="cpu", callbacks=[start],
                      enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1)
    trainer.fit(Failing(args.fail), loader(regression_data(), 8))
    report = {"start_step": start.step, "log_dir": trainer.log_dir, "step": trainer.global_step,
              "last": trainer.checkpoint_callback.last_model_path, "attempt": attempt()}
    if trainer.is_global_zero:
        print("RESULT " + json.dumps(report), flush=True)
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
