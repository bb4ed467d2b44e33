"""The post's ``ddp.py`` for one process: the same loop with the DDP wrapper and process group
removed (one process has nothing to all-reduce). Adapted to CPU or one GPU (``--device``), and to
the shared workload so every framework trains the identical model on identical batches.

Run: python benchmarks/handwritten/single.py --out DIR [--device cuda] [workload options] (no accumulation)
"""
import torch.nn as nn

from benchmarks.workload import (
    StepClock, final_loss, local_device, make_dataset, make_loader, make_model, make_optimizer,
    parse_args, setup_process, write_result,
)


def train(argv=None):
    work, args = parse_args(argv)
    if work.accumulate != 1:
        raise SystemExit("single.py is the post's loop without accumulation; use --accumulate 1")
    setup_process()
    device = local_device(args.device)

    dataset = make_dataset(work)
    # DistributedSampler with one replica: the same shuffling as the DDP runs
    dataloader = make_loader(work, dataset, rank=0, world=1)
    sampler = dataloader.sampler
    model = make_model(work)

    clock = StepClock(args.device)
    clock.begin()
    model = model.to(device)
    optimizer = clock.attach(make_optimizer(model.parameters(), work))
    loss_fn = nn.MSELoss()

    for epoch in range(work.epochs):
        sampler.set_epoch(epoch)  # Ensures different shuffling each epoch

        for batch_idx, (x, y) in enumerate(dataloader):
            x, y = x.to(device), y.to(device)

            optimizer.zero_grad()
            output = model(x)
            loss = loss_fn(output, y)

            loss.backward()
            optimizer.step()

            if batch_idx % 5 == 0:
                print(f"epoch {epoch}  batch {batch_idx}  loss={loss.item():.4f}")

    write_result(args.out, 0, clock, final_loss(model, dataset), args.device, framework="handwritten")


if __name__ == "__main__":
    train()
