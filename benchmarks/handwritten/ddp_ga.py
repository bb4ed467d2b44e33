"""The post's ``ddp_ga.py`` (DDP + gradient accumulation with ``no_sync``), adapted to CPU as
well (``--device cpu``: gloo instead of NCCL, no ``device_ids``; ``--device cuda``: the post's
NCCL and one GPU per rank), and to the shared workload so every framework trains the identical
model on identical batches.

Launch with:
  torchrun --nproc_per_node=2 benchmarks/handwritten/ddp_ga.py --out DIR [--device cuda] [workload options]
"""
from contextlib import nullcontext

import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from benchmarks.memory import StateProbe
from benchmarks.workload import (
    StepClock, final_loss, local_device, make_dataset, make_loader, make_model, make_optimizer,
    parse_args, process_group_backend, setup_process, write_result,
)


def train(argv=None):
    work, args = parse_args(argv)
    setup_process()
    dataset = make_dataset(work)
    model = make_model(work)

    clock = StepClock(args.device)
    clock.begin()
    device = local_device(args.device)
    dist.init_process_group(backend=process_group_backend(args.device))
    rank = dist.get_rank()

    # DistributedSampler ensures each rank gets different data
    dataloader = make_loader(work, dataset, rank=rank, world=dist.get_world_size())
    sampler = dataloader.sampler

    model = model.to(device)

    ddp_model = DDP(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=25,
        gradient_as_bucket_view=True,
    )

    probe = StateProbe()
    optimizer = probe.attach(clock.attach(make_optimizer(ddp_model.parameters(), work)))
    loss_fn = nn.MSELoss()

    ACCUM_STEPS = work.accumulate

    for epoch in range(work.epochs):
        sampler.set_epoch(epoch)  # Ensures different shuffling each epoch

        optimizer.zero_grad()
        for batch_idx, (x, y) in enumerate(dataloader):
            x, y = x.to(device), y.to(device)

            is_last_micro_step = (batch_idx + 1) % ACCUM_STEPS == 0

            # no_sync() suppresses allreduce on accumulation steps.
            # On the last microstep we exit no_sync() so DDP fires
            # the allreduce overlapped with that backward pass.
            ctx = ddp_model.no_sync() if not is_last_micro_step else nullcontext()

            with ctx:
                output = ddp_model(x)
                loss = loss_fn(output, y) / ACCUM_STEPS
                loss.backward()

            if is_last_micro_step:
                optimizer.step()
                optimizer.zero_grad()

                if rank == 0:
                    print(f"epoch {epoch}  batch {batch_idx}  loss={loss.item() * ACCUM_STEPS:.4f}")

    loss = final_loss(model, dataset) if rank == 0 else None
    write_result(args.out, rank, clock, loss, args.device, framework="handwritten", state_bytes=probe.bytes)
    dist.destroy_process_group()


if __name__ == "__main__":
    train()
