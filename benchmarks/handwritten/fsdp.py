"""``ddp_ga.py``'s loop with FSDP2 (``torch.distributed.fsdp.fully_shard``) instead of DDP: the
baseline of the FSDP scenario, written the way torch's FSDP2 documentation writes it.

Every ``Linear`` is its own FSDP unit (its parameters are all-gathered just before its forward
and backward, and freed after), then the root; gradients are reduce-scattered only on the last
micro batch of an accumulation window (``set_requires_gradient_sync``, FSDP2's ``no_sync``).
Each rank keeps a 1/W shard of every parameter, gradient and AdamW state tensor.

Launch with:
  torchrun --nproc_per_node=2 benchmarks/handwritten/fsdp.py --out DIR [--device cuda] [workload options]
"""
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

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
    rank, world = dist.get_rank(), dist.get_world_size()
    dataloader = make_loader(work, dataset, rank=rank, world=world)
    sampler = dataloader.sampler

    mesh = init_device_mesh(device.type, (world,))
    model = model.to(device)
    for layer in model.net:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)

    # Built after sharding: the optimizer holds (and keeps state for) this rank's shards.
    probe = StateProbe()
    optimizer = probe.attach(clock.attach(make_optimizer(model.parameters(), work)))
    loss_fn = nn.MSELoss()

    for epoch in range(work.epochs):
        sampler.set_epoch(epoch)
        optimizer.zero_grad()
        for batch_idx, (x, y) in enumerate(dataloader):
            x, y = x.to(device), y.to(device)
            is_last_micro_step = (batch_idx + 1) % work.accumulate == 0
            model.set_requires_gradient_sync(is_last_micro_step)
            loss = loss_fn(model(x), y) / work.accumulate
            loss.backward()
            if is_last_micro_step:
                optimizer.step()
                optimizer.zero_grad()
                if rank == 0:
                    print(f"epoch {epoch}  batch {batch_idx}  loss={loss.item() * work.accumulate:.4f}")

    loss = final_loss(model, dataset)  # every rank: the sharded forward all-gathers
    write_result(args.out, rank, clock, loss if rank == 0 else None, args.device,
                 framework="handwritten fsdp", state_bytes=probe.bytes)
    dist.destroy_process_group()


if __name__ == "__main__":
    train()
