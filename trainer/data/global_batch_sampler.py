"""`GlobalBatchSampler`: the training order of an epoch, the same on any number of ranks.

Each epoch is one permutation of the dataset, drawn as PyTorch's ``RandomSampler`` draws it (a
seed from torch's default generator, or the user's DataLoader ``generator``, at the first batch),
on rank 0 and shared with every rank; it is cut into global windows of ``G = W * b * A`` positions: optimizer step
``s`` of the epoch trains on positions ``[s*G, (s+1)*G)`` whatever ``W`` (ranks), ``b`` (micro
batch) and ``A`` (accumulation) are. A window is split over the ranks strided (rank ``r`` gets
the window's positions ``r, r + W, ...``) and each rank's share into micro batches of ``b``
consecutive positions; this is what a ``DistributedSampler`` with a ``BatchSampler`` gives for
a full window.

The last window of an epoch holds the ``R = N mod G`` remaining samples (dropped with
``drop_last=True``). Every rank runs the same number of micro batches in it,
``m = ceil(ceil(R / W) / b)``, its share split as evenly as possible; a micro batch of ``n``
samples has its mean loss multiplied by ``W * n / R`` (instead of divided by ``A``), so the
step's gradient is the mean over the ``R`` samples on any ``W``. A rank with fewer samples than
micro batches (``R < W * m``, e.g. ``R < W``) gets a *padding* micro batch: one sample of the
window, trained with weight 0, so that the rank still joins every collective (DDP's all-reduce,
FSDP's all-gathers) without changing the mean.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import Sampler

from trainer.contracts.accumulation import check_accumulation, global_batch_size

__all__ = ["EpochLayout", "GlobalBatchSampler", "global_batch_sampler"]


@dataclasses.dataclass(frozen=True)
class EpochLayout:
    """Where one rank's micro batches of an epoch sit in the epoch's global windows.

    Batch indices ``[first_batch, num_batches)`` are yielded; ``first_batch`` is a multiple of
    ``accumulate`` (more than 0 when the epoch resumes after ``offset`` samples).
    """

    world_size: int
    accumulate: int
    global_batch_size: int  # G = W * b * A
    offset: int  # samples of the epoch consumed before the first yielded window
    first_batch: int
    full_windows: int  # windows of G samples from ``offset`` on
    last_size: int  # samples of the shorter last window (0: none)
    last_counts: tuple[int, ...]  # this rank's samples in each micro batch of the last window

    @property
    def last_window_start(self) -> int:
        """The batch index of the shorter last window's first micro batch."""
        return self.first_batch + self.full_windows * self.accumulate

    @property
    def num_batches(self) -> int:
        """The batch index after this rank's last micro batch of the epoch."""
        return self.last_window_start + len(self.last_counts)

    def loss_weight(self, batch_idx: int) -> float | None:
        """``W * n / R`` for a micro batch of the last window (0.0: padding), else None (``1 / A``)."""
        if self.last_size == 0 or batch_idx < self.last_window_start:
            return None
        return self.world_size * self.last_counts[batch_idx - self.last_window_start] / self.last_size

    def samples_through(self, batch_idx: int) -> int:
        """Samples of the epoch consumed once the window holding ``batch_idx`` has stepped."""
        if batch_idx >= self.last_window_start:
            return self.offset + self.full_windows * self.global_batch_size + self.last_size
        windows = (batch_idx - self.first_batch) // self.accumulate + 1
        return self.offset + windows * self.global_batch_size


class GlobalBatchSampler(Sampler[list[int]]):
    """A batch sampler yielding rank ``rank``'s micro batches of an epoch's global windows.

    Args:
        dataset_size: ``N``, the number of samples.
        batch_size: the micro batch ``b``.
        num_replicas: the world size ``W``.
        rank: this process's global rank.
        shuffle: one permutation per epoch (else the dataset's order).
        seed: ``None`` (the Trainer's choice): each epoch's permutation is drawn as a
            ``RandomSampler`` without a generator draws it, from a seed taken from torch's default
            generator when the epoch's first batch is asked for; so one process trains in exactly
            the order of the same script on plain PyTorch or Lightning. An int: the permutation of
            epoch ``e`` comes from ``seed + e`` (no draw from the default generator).
        generator: the user's DataLoader generator: each epoch's permutation is the next one it
            draws, and the epoch's end draws the one more a ``RandomSampler`` draws there.
        share_seed: rank 0's value of an int on every rank (the strategy's ``broadcast``), so that
            a seed drawn on each rank's own generator becomes rank 0's; ``None`` on one process.
        drop_last: drop the shorter last window (the ``N mod G`` last samples of the permutation).
        accumulate: ``A``; the fit loop sets it each epoch (`set_accumulation`).
    """

    def __init__(
        self,
        dataset_size: int,
        batch_size: int,
        *,
        num_replicas: int = 1,
        rank: int = 0,
        shuffle: bool = True,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        share_seed: Callable[[int], int] | None = None,
        drop_last: bool = False,
        accumulate: int = 1,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"GlobalBatchSampler: batch_size must be an int >= 1, got {batch_size!r}.")
        if not isinstance(num_replicas, int) or num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"GlobalBatchSampler: rank={rank!r} must be in 0..num_replicas-1 (num_replicas={num_replicas!r}).")
        self.dataset_size = dataset_size
        self.batch_size = batch_size
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.seed = seed
        self.generator = generator
        self.share_seed = share_seed
        self.drop_last = drop_last
        self.epoch = 0
        self.accumulate = check_accumulation(accumulate)  # A: the fit loop gives each epoch's (`set_accumulation`)
        self._start = 0  # samples of this epoch already trained (a resume)

    @property
    def global_batch_size(self) -> int:
        """``G = W * b * A``: the samples of one optimizer step."""
        return global_batch_size(self.num_replicas, self.batch_size, self.accumulate)

    def set_epoch(self, epoch: int) -> None:
        """A new epoch: its own permutation, from its first sample."""
        self.epoch = epoch
        self._start = 0

    def set_accumulation(self, accumulate: int) -> None:
        """The epoch's ``A`` (read after ``on_train_epoch_start``)."""
        self.accumulate = check_accumulation(accumulate)

    def start_at(self, samples_done: int) -> None:
        """This epoch continues after its first ``samples_done`` samples (a resume)."""
        if not 0 <= samples_done <= self.dataset_size:
            raise ValueError(f"start_at({samples_done}) is outside the epoch of {self.dataset_size} samples.")
        self._start = samples_done

    def layout(self) -> EpochLayout:
        """This epoch's windows as seen from this rank."""
        G, W, b = self.global_batch_size, self.num_replicas, self.batch_size
        left = self.dataset_size - self._start
        full, last = divmod(left, G)
        if self.drop_last:
            last = 0
        counts: tuple[int, ...] = ()
        if last:
            share = len(range(self.rank, last, W))
            largest_share = -(-last // W)
            micro = -(-largest_share // b)  # the same on every rank
            base, extra = divmod(share, micro)
            counts = tuple(base + (k < extra) for k in range(micro))
        return EpochLayout(
            world_size=W,
            accumulate=self.accumulate,
            global_batch_size=G,
            offset=self._start,
            first_batch=(self._start // G) * self.accumulate,
            full_windows=full,
            last_size=last,
            last_counts=counts,
        )

    def __len__(self) -> int:
        return self.layout().num_batches

    def __iter__(self) -> Iterator[list[int]]:
        # A generator function: the permutation is drawn at the first batch, as a RandomSampler
        # draws it (after the DataLoader iterator's own draw of its base seed).
        layout = self.layout()
        order = self._permutation()
        W, b, rank = self.num_replicas, self.batch_size, self.rank
        start = layout.offset
        for _ in range(layout.full_windows):
            share = order[start + rank : start + layout.global_batch_size : W]
            for k in range(self.accumulate):
                yield share[k * b : (k + 1) * b]
            start += layout.global_batch_size
        if layout.last_size:
            share = order[start + rank : start + layout.last_size : W]
            at = 0
            for count in layout.last_counts:
                # padding: the window's first sample, trained with weight 0 (see the module docstring)
                yield share[at : at + count] if count else [order[start]]
                at += count
        if self.shuffle and self.generator is not None:
            # A RandomSampler draws one more (empty) permutation from the user's generator when its
            # epoch runs out: the next epoch's draws from it are then the ones PyTorch makes.
            torch.randperm(self.dataset_size, generator=self.generator)

    def _permutation(self) -> list[int]:
        n = self.dataset_size
        if not self.shuffle:
            return list(range(n))
        if self.generator is not None:
            return torch.randperm(n, generator=self.generator).tolist()
        if self.seed is not None:
            seed = self.seed + self.epoch
        else:  # RandomSampler's draw, from this rank's default generator; rank 0's wins
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
            if self.share_seed is not None:
                seed = self.share_seed(seed)
        return torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()


def global_batch_sampler(loader: Any) -> GlobalBatchSampler | None:
    """The loader's `GlobalBatchSampler`, when the Trainer gave it one."""
    sampler = getattr(loader, "batch_sampler", None)
    return sampler if isinstance(sampler, GlobalBatchSampler) else None
