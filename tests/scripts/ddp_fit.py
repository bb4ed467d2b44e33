"""Launched by tests/launch/test_ddp_launch.py the way users launch: torchrun, `python` + devices, ddp_spawn.

Trains `Regression` (tests/helpers/models.py) for 2 epochs on 32 samples, micro batch 4, shuffle=False,
and saves each rank's placement, final parameters and global_step with `save_rank_result`.
Markers on stdout let the test count which processes ran which part of the script:

- ``START pid=<pid> rank=<$RANK>``: every process that runs the script (the launcher too);
- ``FIT_DONE pid=<pid>``: after ``fit``, global rank 0 only;
- ``END pid=<pid> rank=<$RANK>``: the last line of the script.

Options: ``--devices N``, ``--num-nodes N``, ``--strategy NAME`` (Trainer arguments; default:
adopt the launcher; under ``fsdp`` the saved parameters are the gathered whole ones; ``ddp,fsdp``
fits once per strategy in the same launch, each from a fresh model, and saves each strategy's
results under ``$LOCKSTEP_TEST_OUT/<strategy>/``),
``--fail-rank R --fail-step S`` (``training_step`` raises ``RuntimeError("boom on rank R")`` on
global rank R at global step S; ``--fail-kind shape`` makes it a user's shape bug instead,
``torch.ones(2, 3) @ torch.ones(2, 3)``; with ``--stall-others`` every other rank then stalls for 10
minutes, a stand-in for a collective that never learns of the dead peer, as NCCL waits for its
timeout, so only the launcher stopping the group ends the run). ``prepare_data`` appends a line to
``$LOCKSTEP_TEST_OUT/prepare_data.txt``; a ``rank_zero_only`` function appends one to
``rank_zero_only.txt``. ``--checkpointing`` adds the default ModelCheckpoint (files under
``$LOCKSTEP_TEST_OUT/checkpoints``) and saves its ``best_model_path``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import torch

from tests.helpers.distributed import save_rank_result
from tests.helpers.models import QUIET, Regression, loader, params_of, regression_data
from trainer import Trainer, rank_zero_only

OUT = os.environ.get("LOCKSTEP_TEST_OUT", ".")


class Model(Regression):
    """`Regression` that records prepare_data calls and can fail on one rank."""

    def __init__(
        self, fail_rank: int | None = None, fail_step: int | None = None, stall_others: bool = False,
        fail_kind: str = "boom",
    ) -> None:
        super().__init__("sgd")
        self.fail_rank, self.fail_step, self.stall_others = fail_rank, fail_step, stall_others
        self.fail_kind = fail_kind

    def prepare_data(self) -> None:
        with open(os.path.join(OUT, "prepare_data.txt"), "a") as f:
            f.write(f"node={self.node_rank} local={self.local_rank} global={self.global_rank}\n")

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.fail_rank is not None and self.global_step == self.fail_step:
            if self.global_rank == self.fail_rank and self.fail_kind == "shape":
                return torch.ones(2, 3) @ torch.ones(2, 3)  # a user's one-line shape bug
            if self.global_rank == self.fail_rank:
                raise RuntimeError(f"boom on rank {self.global_rank}")
            if self.stall_others:
                time.sleep(600)
        return super().training_step(batch, batch_idx)

    def on_train_end(self) -> None:
        # under FSDP each rank holds shards: gather the whole parameters while the group exists
        self.final_params = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in params_of(self)]


@rank_zero_only
def write_once(path: str) -> None:
    with open(path, "a") as f:
        f.write(f"pid={os.getpid()}\n")


def _say(line: str) -> None:
    # One write() per line: two workers share the pipe, and print() writes the newline apart.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", default="auto")
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-step", type=int, default=None)
    parser.add_argument("--stall-others", action="store_true")
    parser.add_argument("--fail-kind", choices=("boom", "shape"), default="boom")
    parser.add_argument("--checkpointing", action="store_true")  # a ModelCheckpoint under OUT
    args = parser.parse_args()

    _say(f"START pid={os.getpid()} rank={os.environ.get('RANK')}")
    strategies = args.strategy.split(",")
    for strategy in strategies:
        _fit(args, strategy, subdir=strategy if len(strategies) > 1 else "")
    _say(f"END pid={os.getpid()} rank={os.environ.get('RANK')}")


def _fit(args: argparse.Namespace, strategy: str, subdir: str) -> None:
    devices = args.devices if args.devices == "auto" else int(args.devices)
    options = {**QUIET, "enable_checkpointing": args.checkpointing, "default_root_dir": OUT}
    trainer = Trainer(accelerator="cpu",
        max_epochs=2, devices=devices, num_nodes=args.num_nodes, strategy=strategy, **options
    )
    model = Model(args.fail_rank, args.fail_step, args.stall_others, args.fail_kind)
    trainer.fit(model, loader(regression_data(32), 4))
    if trainer.is_global_zero:
        _say(f"FIT_DONE pid={os.getpid()}")
    write_once(os.path.join(OUT, "rank_zero_only.txt"))
    save_rank_result(
        {
            "global_rank": trainer.global_rank,
            "local_rank": trainer.local_rank,
            "node_rank": trainer.node_rank,
            "world_size": trainer.world_size,
            "num_nodes": trainer.num_nodes,
            # the module sees the same placement as its Trainer
            "module_ranks": (model.global_rank, model.local_rank, model.node_rank, model.world_size),
            "global_step": trainer.global_step,
            # ddp_spawn's launching process gets the trained weights copied back, but ran no hooks
            "params": getattr(model, "final_params", None) or params_of(model),
            "best_model_path": trainer.checkpoint_callback.best_model_path if args.checkpointing else None,
        },
        rank=trainer.global_rank,
        subdir=subdir,
    )


if __name__ == "__main__":
    main()
