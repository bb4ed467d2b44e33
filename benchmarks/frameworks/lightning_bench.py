"""The workload as a PyTorch Lightning user writes it (needs the ``bench`` extra).

Run: python benchmarks/frameworks/lightning_bench.py --out DIR [--device cuda] [workload options]
     torchrun --nproc_per_node=2 benchmarks/frameworks/lightning_bench.py --out DIR ...

Lightning runs without logger, progress bar, checkpointing and model summary, like Lockstep's
core comparison. The loader already holds a ``DistributedSampler``, which Lightning keeps.
"""
from __future__ import annotations

import warnings
from typing import Any

import lightning as L
import torch
from lightning.pytorch.strategies import DDPStrategy
from torch import nn

from benchmarks.workload import (
    StepClock, Workload, final_loss, make_dataset, make_loader, make_model, make_optimizer,
    parse_args, rank_and_world, setup_process, write_result,
)


class BenchModule(L.LightningModule):
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
    warnings.filterwarnings("ignore")  # "few dataloader workers" and similar advice
    rank, world = rank_and_world()
    dataset = make_dataset(work)
    loader = make_loader(work, dataset, rank, world)
    clock = StepClock(args.device)
    module = BenchModule(work, clock)

    clock.begin()
    trainer = L.Trainer(
        accelerator="gpu" if args.device == "cuda" else "cpu",
        devices=world,
        strategy=DDPStrategy(bucket_cap_mb=25, gradient_as_bucket_view=True) if world > 1 else "auto",
        max_epochs=work.epochs,
        accumulate_grad_batches=work.accumulate,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, loader)
    loss = final_loss(module.model, dataset) if rank == 0 else None
    write_result(args.out, rank, clock, loss, args.device, framework="lightning")


if __name__ == "__main__":
    main()
