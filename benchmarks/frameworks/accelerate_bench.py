"""The workload as an HF Accelerate user writes it (needs the ``bench`` extra).

Run: python benchmarks/frameworks/accelerate_bench.py --out DIR [--device cuda] [workload options]
     torchrun --nproc_per_node=2 benchmarks/frameworks/accelerate_bench.py --out DIR ...

The loader is not passed to ``accelerator.prepare``: Accelerate would shard its batch sampler
again on top of the ``DistributedSampler`` every framework uses (so each rank would see a quarter
of the data); the loop moves the batches to ``accelerator.device`` itself, as Accelerate's
documentation does for an unprepared loader. ``accelerator.accumulate`` then counts micro
batches itself, which matches the windows here because every epoch's batch count is a multiple
of the accumulation.
"""
from __future__ import annotations

import warnings

from accelerate import Accelerator, DistributedDataParallelKwargs
from torch import nn

from benchmarks.workload import (
    StepClock, final_loss, make_dataset, make_loader, make_model, make_optimizer, parse_args,
    setup_process, write_result,
)


def main(argv: list[str] | None = None) -> None:
    work, args = parse_args(argv)
    setup_process()
    warnings.filterwarnings("ignore")
    dataset = make_dataset(work)
    model = make_model(work)
    clock = StepClock(args.device)

    clock.begin()
    accelerator = Accelerator(
        cpu=args.device == "cpu",
        gradient_accumulation_steps=work.accumulate,
        kwargs_handlers=[DistributedDataParallelKwargs(bucket_cap_mb=25, gradient_as_bucket_view=True)],
    )
    rank, world = accelerator.process_index, accelerator.num_processes
    loader = make_loader(work, dataset, rank, world)
    sampler = loader.sampler
    optimizer = clock.attach(make_optimizer(model.parameters(), work))
    model, optimizer = accelerator.prepare(model, optimizer)
    loss_fn = nn.MSELoss()

    for epoch in range(work.epochs):
        sampler.set_epoch(epoch)
        for batch_idx, (x, y) in enumerate(loader):
            x, y = x.to(accelerator.device), y.to(accelerator.device)
            with accelerator.accumulate(model):
                loss = loss_fn(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients and accelerator.is_main_process and batch_idx % 5 == 0:
                print(f"epoch {epoch}  batch {batch_idx}  loss={loss.item():.4f}")

    loss = final_loss(accelerator.unwrap_model(model), dataset) if rank == 0 else None
    write_result(args.out, rank, clock, loss, args.device, framework="accelerate")
    accelerator.end_training()


if __name__ == "__main__":
    main()
