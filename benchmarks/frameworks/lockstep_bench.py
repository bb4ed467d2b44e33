"""The workload as a Lockstep user writes it.

Run: python benchmarks/frameworks/lockstep_bench.py --out DIR [--device cuda] [workload options] [--defaults]
     torchrun --nproc_per_node=2 benchmarks/frameworks/lockstep_bench.py --out DIR [--strategy fsdp] ...

Without ``--defaults`` the Trainer runs without logger, progress bar and checkpointing (the core
comparison); with it, the Trainer's defaults (TensorBoard logger, progress bar, checkpoint).
"""
from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from benchmarks.memory import StateProbe
from benchmarks.workload import (
    StepClock, Workload, final_loss, make_dataset, make_loader, make_model, make_optimizer,
    parse_args, rank_and_world, setup_process, write_result,
)
from trainer import DDPStrategy, FSDPStrategy, Trainer, TrainModule


class BenchModule(TrainModule):
    """The post's model and loss; ``self.log`` of the loss, as a user would."""

    def __init__(self, work: Workload, clock: StepClock, probe: StateProbe) -> None:
        super().__init__()
        self.model = make_model(work)
        self.loss_fn = nn.MSELoss()
        self.work = work
        self.clock = clock
        self.probe = probe

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = self.loss_fn(self.model(x), y)  # the model itself: no extra module call to count
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return self.probe.attach(self.clock.attach(make_optimizer(self.parameters(), self.work)))


def main(argv: list[str] | None = None) -> None:
    work, args = parse_args(argv)
    setup_process()
    rank, world = rank_and_world()
    dataset = make_dataset(work)
    loader = make_loader(work, dataset, rank, world)
    clock = StepClock(args.device)
    probe = StateProbe()
    module = BenchModule(work, clock, probe)

    clock.begin()
    options: dict[str, Any] = (
        {"default_root_dir": os.path.join(args.out, "run")}
        if args.defaults
        else {"logger": False, "enable_progress_bar": False, "enable_checkpointing": False, "enable_model_summary": False}
    )
    trainer = Trainer(
        accelerator=args.device,
        devices=world,  # not "auto": on a GPU machine that means every GPU, even for one process
        strategy=_strategy(args.strategy, world),
        max_epochs=work.epochs,
        accumulate_grad_batches=work.accumulate,
        **options,
    )
    trainer.fit(module, loader)
    # Under FSDP every rank runs this forward (it all-gathers the parameters); rank 0 reports.
    loss = final_loss(module, dataset) if args.strategy == "fsdp" or rank == 0 else None
    name = "lockstep (defaults)" if args.defaults else "lockstep"
    name += " fsdp" if args.strategy == "fsdp" else ""
    write_result(args.out, rank, clock, loss if rank == 0 else None, args.device, framework=name,
                 state_bytes=probe.bytes)


def _strategy(name: str, world: int) -> Any:
    if name == "fsdp":  # as benchmarks/handwritten/fsdp.py: every Linear its own unit
        return FSDPStrategy(auto_wrap_policy={nn.Linear})
    if world == 1:
        return "auto"
    return DDPStrategy(bucket_cap_mb=25, gradient_as_bucket_view=True)


if __name__ == "__main__":
    main()
