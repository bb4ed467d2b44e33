"""Data parallelism and gradient accumulation written by hand, then the same run with the Trainer.

    torchrun --nproc_per_node 2 examples/ddp_from_scratch.py
    python examples/ddp_from_scratch.py --nproc 2    # the same; this script starts the processes

One small regression model is trained three times, from the same initial weights, on the same
data in the same order, with W processes x b samples x A accumulated micro batches per step:

1. by hand: every process trains its own copy of the model on its own shard of the data
   (`SharedShuffle`: rank 0's shuffled order, cut into shards); `HandWrittenDDP` checks that all copies start from rank 0's weights,
   and after the backward pass of the last micro batch of each accumulation window it averages
   the gradients over the processes (one `all_reduce`), so every copy takes the same step and
   the copies stay identical. The micro-batch losses are divided by the window's size: a mean
   over the window, also in the shorter last window of an epoch (with the defaults on 2
   processes: 10 micro batches per epoch, A = 3, windows of 3, 3, 3 and 1).
2. `Trainer(strategy="allreduce")`: the same algorithm inside the Trainer.
3. `Trainer(strategy="ddp")`: torch's DistributedDataParallel, which all-reduces gradient buckets
   while the backward pass still runs and skips the all-reduce inside the window (`no_sync`).

All three must end with the same parameters: the script prints the largest absolute difference
of each pair and exits with status 1 when one exceeds `--tolerance`.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from trainer import Trainer, TrainModule, seed_everything

SEED = 7


def make_data(n: int = 80) -> TensorDataset:
    """``n`` noisy samples of a fixed random linear map from 16 to 4 numbers."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 16, generator=g)
    y = x @ torch.randn(16, 4, generator=g) + 0.1 * torch.randn(n, 4, generator=g)
    return TensorDataset(x, y)


def make_net() -> nn.Module:
    torch.manual_seed(SEED)  # every rank and every run builds the same initial weights
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))


class HandWrittenDDP:
    """What DDP does for correctness: one starting point everywhere, averaged gradients per step."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        mine = parameters_to_vector(self.params).detach()
        rank0 = mine.clone()
        dist.broadcast(rank0, src=0)
        # Every rank learns whether any rank differs: a rank that raised alone would leave the
        # others waiting in their next collective forever.
        differs = torch.tensor([float(not torch.equal(mine, rank0))], device=mine.device)
        dist.all_reduce(differs, op=dist.ReduceOp.MAX)
        if differs.item():
            raise RuntimeError("The ranks built different initial weights: seed before building the model.")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)

    def average_gradients(self) -> None:
        """Sum every rank's gradients with one all_reduce of a flat copy, then divide by W."""
        grads = [p.grad for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)  # torch.distributed has no "mean" for gloo
        flat /= dist.get_world_size()
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


class SharedShuffle(DistributedSampler):
    """This rank's shard of an epoch order drawn as a plain ``shuffle=True`` loader draws it (a seed
    from torch's default generator when the epoch starts), rank 0's seed shared with every rank:
    the order the same script has on one process, cut into disjoint shards."""

    def __init__(self, data: TensorDataset, device: torch.device) -> None:
        super().__init__(data, shuffle=True)
        self.device = device

    def __iter__(self) -> Any:
        seed = torch.empty((), dtype=torch.int64).random_().to(self.device)
        dist.broadcast(seed, src=0)  # every rank cuts rank 0's permutation
        self.seed, self.epoch = int(seed.item()), 0
        return super().__iter__()


def train_by_hand(data: TensorDataset, device: torch.device, args: argparse.Namespace) -> nn.Module:
    net = make_net().to(device)
    model = HandWrittenDDP(net)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=SharedShuffle(data, device))  # a new order each epoch
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    n, a = len(loader), args.accumulate
    for _ in range(args.epochs):
        for i, (x, y) in enumerate(loader):
            start = i - i % a
            window = min(a, n - start)  # the last window of an epoch may be shorter
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device)) / window
            loss.backward()  # adds to .grad: the window's gradients accumulate
            if i == start + window - 1:  # the window's last micro batch: sync once, step once
                model.average_gradients()
                opt.step()
                opt.zero_grad(set_to_none=True)
    return net


class Regressor(TrainModule):
    """The same network and optimizer as a TrainModule."""

    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.net = make_net()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def train_with_trainer(strategy: str, data: TensorDataset, accelerator: str, args: argparse.Namespace) -> nn.Module:
    module = Regressor(args.lr)
    trainer = Trainer(
        accelerator=accelerator,
        strategy=strategy,
        max_epochs=args.epochs,
        accumulate_grad_batches=args.accumulate,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    # A plain shuffling loader: the Trainer gives each rank its shard of each epoch's order, drawn
    # as this loader would draw it on one process (rank 0's draw, shared).
    trainer.fit(module, DataLoader(data, batch_size=args.batch_size, shuffle=True))
    return module.net


def compare(final: dict[str, torch.Tensor], tolerance: float) -> tuple[list[str], bool]:
    """The largest absolute difference of every pair of runs, as lines to print, and whether all
    are within ``tolerance``."""
    names, lines, ok = list(final), [], True
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            diff = (final[first] - final[second]).abs().max().item()
            ok = ok and diff <= tolerance
            lines.append(f"max |{first} - {second}| = {diff:.3e}")
    return lines, ok


def worker(args: argparse.Namespace) -> bool:
    """One process of the job, placed by torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK...)."""
    local_rank, local_world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    enough_gpus = torch.cuda.is_available() and torch.cuda.device_count() >= local_world
    if args.accelerator == "cuda" and not enough_gpus:
        raise RuntimeError(f"--accelerator cuda needs {local_world} CUDA devices on this node, one per process")
    use_cuda = args.accelerator == "cuda" or (args.accelerator == "auto" and enough_gpus)
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)  # pin before NCCL starts, or every rank talks to cuda:0
    torch.set_num_threads(1)
    dist.init_process_group("nccl" if use_cuda else "gloo")  # env://: the variables above
    seed_everything(SEED)  # each run's epoch orders are drawn from torch's generator, reseeded by make_net
    try:
        data = make_data()
        final = {"by hand": parameters_to_vector(train_by_hand(data, device, args).parameters()).detach()}
        for strategy in ("allreduce", "ddp"):
            # the Trainer joins the existing process group instead of making its own
            net = train_with_trainer(strategy, data, "cuda" if use_cuda else "cpu", args)
            final[strategy] = parameters_to_vector(net.parameters()).detach().to(device)
        lines, ok = compare(final, args.tolerance)
        if dist.get_rank() == 0:
            x, y = data.tensors
            loss = nn.functional.mse_loss(make_net()(x), y).item()
            trained = nn.functional.mse_loss(net_with(final["by hand"])(x), y).item()
            print(f"world size {dist.get_world_size()}, micro batch {args.batch_size}, accumulate "
                  f"{args.accumulate}: global batch {dist.get_world_size() * args.batch_size * args.accumulate}; "
                  f"loss on all data {loss:.4f} before, {trained:.4f} after {args.epochs} epochs")
            print("\n".join(lines))
            print(f"{'OK' if ok else 'MISMATCH'}: the three runs end with "
                  f"{'the same' if ok else 'different'} parameters (tolerance {args.tolerance:g})")
        return ok
    finally:
        dist.destroy_process_group()


def net_with(vector: torch.Tensor) -> nn.Module:
    """A CPU copy of the network holding ``vector``'s parameters."""
    net = make_net()
    torch.nn.utils.vector_to_parameters(vector.cpu(), net.parameters())
    return net


def _spawned(local_rank: int, world_size: int, port: int, args: argparse.Namespace) -> None:
    # what torchrun would set for this process
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(local_rank),
                      LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size))
    if not worker(args):
        sys.exit(1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=2, help="processes to start (not under torchrun)")
    parser.add_argument("--accelerator", default="auto", choices=["auto", "cpu", "cuda"],
                        help="auto: one GPU per process if there are enough, else the CPU")
    parser.add_argument("--batch-size", type=int, default=4, help="micro batch per process (b)")
    parser.add_argument("--accumulate", type=int, default=3, help="micro batches per optimizer step (A)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--tolerance", type=float, default=1e-5, help="largest parameter difference allowed")
    args = parser.parse_args(argv)
    if "RANK" in os.environ:  # started by torchrun (or srun with its variables exported)
        sys.exit(0 if worker(args) else 1)
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    try:
        torch.multiprocessing.spawn(_spawned, args=(args.nproc, port, args), nprocs=args.nproc)
    except torch.multiprocessing.ProcessExitedException as err:
        sys.exit(err.exit_code or 1)


if __name__ == "__main__":
    main()
