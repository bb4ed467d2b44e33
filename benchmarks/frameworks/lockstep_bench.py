"""The workload as a Lockstep user writes it.

Run: python benchmarks/frameworks/lockstep_bench.py --out DIR [workload options] [--defaults]
     torchrun --nproc_per_node=2 benchmarks/frameworks/lockstep_bench.py --out DIR ...

Without ``--defaults`` the Trainer runs without logger, progress bar and checkpointing (the core
comparison); with it, the Trainer's defaults (TensorBoard logger, progress bar, checkpoint).
"""
from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from benchmarks.workload import (
    StepClock, Workload, final_loss, make_dataset, make_loader, make_model, make_optimizer,
    parse_args, rank_and_world, setup_process, write_result,
)
from trainer import DDPStrategy, Trainer, TrainModule


class BenchModule(TrainModule):
    """The post's model and loss; ``self.log`` of the loss, as a user would."""

    def __init__(self, work: Workload, clock: StepClock) -> None:
        super().__init__()
        self.model = make_model(work)
        self.loss_fn = nn.MSELoss()
        self.work = work
        self.clock = clock

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = self.loss_fn(self.model(x), y)  # the model itself: no extra module call to count
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return self.clock.attach(make_optimizer(self.parameters(), self.work))


def main(argv: list[str] | None = None) -> None:
    work, args = parse_args(argv)
    setup_process()
    rank, world = rank_and_world()
    dataset = make_dataset(work)
    loader = make_loader(work, dataset, rank, world)
    clock = StepClock()
    module = BenchModule(work, clock)

    clock.begin()
    options: dict[str, Any] = (
        {"default_root_dir": os.path.join(args.out, "run")}
        if args.defaults
        else {"logger": False, "enable_progress_bar": False, "enable_checkpointing": False, "enable_model_summary": False}
    )
    trainer = Trainer(
        accelerator="cpu",
        strategy=DDPStrategy(bucket_cap_mb=25, gradient_as_bucket_view=True) if world > 1 else "auto",
        max_epochs=work.epochs,
        accumulate_grad_batches=work.accumulate,
        **options,
    )
    trainer.fit(module, loader)
    loss = final_loss(module.model, dataset) if rank == 0 else None
    name = "lockstep (defaults)" if args.defaults else "lockstep"
    write_result(args.out, rank, clock, loss, framework=name)


if __name__ == "__main__":
    main()
