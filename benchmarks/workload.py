"""The one workload every benchmarked loop trains, and what each run reports.

The model, data, optimizer and loss are the blog post's (``ToyModel``: Linear(1024, h) - ReLU -
Linear(h, h) - ReLU - Linear(h, 256), random regression data, AdamW 1e-3, MSELoss,
``DistributedSampler``); ``depth`` repeats the middle layer (the FSDP scenario's deeper model). Every script builds them through this module, so all frameworks start
from identical weights, see identical batches in identical order, and must end with the same
loss. Each script writes one JSON result per rank; the runner compares them.

Timing uses ``Optimizer.register_step_post_hook``: the same host-clock stamp after every
optimizer step, in every framework, with no change to any framework's loop. On CUDA the stamp
waits for the GPU first (``torch.cuda.synchronize``), so a step is counted when its kernels have
run, not when they were queued.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

IN_FEATURES = 1024
OUT_FEATURES = 256


@dataclasses.dataclass(frozen=True)
class Workload:
    """What to train: model width and depth, micro batch, accumulation, data size, epochs."""

    hidden: int = 1024
    depth: int = 1
    batch_size: int = 64
    accumulate: int = 1
    samples: int = 1000
    epochs: int = 2
    lr: float = 1e-3
    seed: int = 0

    def to_argv(self) -> list[str]:
        """Command-line arguments that rebuild this workload in a script (see `parse_args`)."""
        out = []
        for f in dataclasses.fields(self):
            out += [f"--{f.name.replace('_', '-')}", str(getattr(self, f.name))]
        return out


DEVICES = ("cpu", "cuda")


def parse_args(argv: list[str] | None = None) -> tuple[Workload, argparse.Namespace]:
    """The workload and the script options (``--out DIR``, ``--device``, ``--defaults``,
    ``--strategy``) from the command line."""
    parser = argparse.ArgumentParser()
    for f in dataclasses.fields(Workload):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    parser.add_argument("--out", required=True, help="directory for rank<R>.json")
    parser.add_argument("--device", choices=DEVICES, default="cpu", help="where to train (cuda: one GPU per rank)")
    parser.add_argument("--defaults", action="store_true", help="Lockstep: default callbacks on")
    parser.add_argument("--strategy", choices=("ddp", "fsdp"), default="ddp", help="Lockstep, several ranks")
    ns = parser.parse_args(argv)
    work = Workload(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(Workload)})
    return work, ns


def setup_process() -> None:
    """One compute thread per process: the machine is small and shared, and DDP runs 2 ranks."""
    torch.set_num_threads(1)


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the world size, from torchrun's variables (0, 1 without them)."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def local_device(kind: str) -> torch.device:
    """The CPU, or this process's GPU (``cuda:LOCAL_RANK``, made the current device)."""
    if kind == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def process_group_backend(kind: str) -> str:
    """The collective backend for ``kind``: NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if kind == "cuda" else "gloo"


class ToyModel(nn.Module):
    """The blog post's model, with a configurable hidden width and ``depth`` middle layers."""

    def __init__(self, hidden: int, depth: int = 1) -> None:
        super().__init__()
        middle = [layer for _ in range(depth) for layer in (nn.Linear(hidden, hidden), nn.ReLU())]
        self.net = nn.Sequential(
            nn.Linear(IN_FEATURES, hidden), nn.ReLU(), *middle, nn.Linear(hidden, OUT_FEATURES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_model(work: Workload) -> ToyModel:
    """The model with weights drawn from ``work.seed`` (identical in every framework)."""
    torch.manual_seed(work.seed)
    return ToyModel(work.hidden, work.depth)


def make_dataset(work: Workload) -> TensorDataset:
    """Random regression data from its own generator (the global RNG is left alone)."""
    g = torch.Generator().manual_seed(work.seed + 1)
    x = torch.randn(work.samples, IN_FEATURES, generator=g)
    y = torch.randn(work.samples, OUT_FEATURES, generator=g)
    return TensorDataset(x, y)


def make_loader(work: Workload, dataset: TensorDataset, rank: int, world: int) -> DataLoader:
    """The post's loader: a shuffling ``DistributedSampler`` (also for one process, so every
    framework sees the same order), ``batch_size`` samples per micro batch."""
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=work.seed)
    return DataLoader(dataset, batch_size=work.batch_size, sampler=sampler)


def make_optimizer(params: Any, work: Workload) -> torch.optim.Optimizer:
    """AdamW at the workload's learning rate."""
    return torch.optim.AdamW(params, lr=work.lr)


class StepClock:
    """Host-clock stamps after every optimizer step (the same measurement in every framework).

    With ``device="cuda"`` every stamp first waits for the GPU's queued work to finish.
    """

    def __init__(self, device: str = "cpu") -> None:
        self.start = time.perf_counter()
        self.stamps: list[float] = []
        self.cpu_stamps: list[float] = []  # this process's CPU time: robust to a busy machine
        self._synchronize = torch.cuda.synchronize if device == "cuda" else None

    def begin(self) -> None:
        """Mark the moment the framework takes over (``fit`` / ``prepare`` / the loop's set-up)."""
        self.start = time.perf_counter()

    def attach(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Stamp after each ``optimizer.step()``; returns the optimizer."""

        def stamp(*_: Any) -> None:
            if self._synchronize is not None:
                self._synchronize()
            self.stamps.append(time.perf_counter())
            self.cpu_stamps.append(time.process_time())

        optimizer.register_step_post_hook(stamp)
        return optimizer

    def summary(self) -> dict[str, Any]:
        """Steps, time to the first step, and steady-state seconds per step (wall and CPU).

        The first tenth of the steps (at least 3) is left out of the steady state: allocator
        warm-up and first-call costs are start-up, reported separately. The rest is cut into
        `CHUNKS` runs of consecutive steps and the median chunk's mean is reported: a burst of
        other work on a shared machine then spoils a chunk, not the result (``step_mean_s`` is
        the plain mean). CPU seconds are this process's (all its threads): time spent
        descheduled does not count, time waiting for another rank does not either.
        """
        n = len(self.stamps)
        out: dict[str, Any] = {"steps": n, "first_step_s": None, "step_s": None, "step_cpu_s": None,
                               "step_mean_s": None, "train_s": None}
        if n:
            out["first_step_s"] = self.stamps[0] - self.start
            out["train_s"] = self.stamps[-1] - self.start
        skip = max(3, n // 10)
        if n - 1 > skip:
            out["step_s"] = _median_chunk(self.stamps[skip:])
            out["step_cpu_s"] = _median_chunk(self.cpu_stamps[skip:])
            out["step_mean_s"] = (self.stamps[-1] - self.stamps[skip]) / (n - 1 - skip)
            # the 10th percentile of single steps' CPU time: another process's work only adds to a
            # step (cache misses, descheduling mid-stamp), so a low quantile shows the step's own cost
            cpu = sorted(b - a for a, b in zip(self.cpu_stamps[skip:], self.cpu_stamps[skip + 1:]))
            out["step_cpu_p10_s"] = cpu[len(cpu) // 10]
        return out


CHUNKS = 8


def _median_chunk(stamps: list[float]) -> float:
    """Median over up to `CHUNKS` equal runs of consecutive intervals of the mean interval."""
    intervals = len(stamps) - 1
    chunks = max(1, min(CHUNKS, intervals // 4))  # at least 4 steps per chunk
    bounds = [round(i * intervals / chunks) for i in range(chunks + 1)]
    means = [(stamps[b] - stamps[a]) / (b - a) for a, b in zip(bounds, bounds[1:])]
    return statistics.median(means)


@torch.no_grad()
def final_loss(model: nn.Module, dataset: TensorDataset) -> float:
    """MSE of the trained model on the whole dataset: equal across frameworks when they trained alike.

    Under FSDP every rank must call it (the forward all-gathers the parameters).
    """
    device = next(model.parameters()).device
    x, y = (t.to(device) for t in dataset.tensors)
    was_training = model.training
    model.eval()
    loss = float(nn.functional.mse_loss(model(x), y))
    model.train(was_training)
    return loss


def peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def peak_device_mb(kind: str) -> float | None:
    """Peak memory allocated by tensors on this process's GPU, in MiB; None on the CPU."""
    return torch.cuda.max_memory_allocated() / 2**20 if kind == "cuda" else None


def write_result(
    out_dir: str, rank: int, clock: StepClock, loss: float | None, device: str = "cpu", **extra: Any
) -> None:
    """Write this rank's ``rank<R>.json``: step timings, final loss, peak RSS (and GPU memory)."""
    result = {**clock.summary(), "final_loss": loss, "peak_rss_mb": peak_rss_mb(),
              "peak_device_mb": peak_device_mb(device), "rank": rank, **extra}
    path = Path(out_dir) / f"rank{rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, path)
