"""Copying the next batch to the GPU while the current one computes.

`Prefetcher` wraps the iterable the fit loop draws batches from. When it hands out batch *i*,
the copy of batch *i + 1* is already queued on a side CUDA stream (from pinned host memory, see
`Accelerator.pin_loader_memory`), so the copy overlaps batch *i*'s forward and backward instead
of running before them. Two stream rules keep this correct:

- before a batch is handed out, the compute stream waits for the copies queued so far
  (``wait_stream``): no kernel reads a batch whose copy has not finished;
- every tensor of a handed-out batch is marked as used by the compute stream
  (``record_stream``): its memory was allocated on the side stream, and without the mark the
  caching allocator could give it to the next copy as soon as Python drops the batch, while
  kernels queued on the compute stream still read it.

Batches holding objects that move themselves (a user type with ``.to``) cannot have their
tensors marked, so they are copied on the compute stream instead (correct, just not overlapped).

On CPU the class runs the same logic with a no-op stream, which is how the tests prove it yields
the same batches in the same order as the plain path; the fit loop uses it only on CUDA.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any, Callable, ContextManager

import torch

from trainer.accelerators.accelerator import move_to_device
from trainer.data.batch import leaves, tensors

_END = object()


class _NoOpStreams:
    """The stream operations of the CUDA path, doing nothing (CPU)."""

    def copying(self) -> ContextManager[Any]:
        return contextlib.nullcontext()

    def wait_for_copies(self) -> None:
        pass

    def mark_used(self, tensor: torch.Tensor) -> None:
        pass


class _CudaStreams:
    """A side stream for copies; the device's current stream is the compute stream."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.side = torch.cuda.Stream(device=device)

    def copying(self) -> ContextManager[Any]:
        return torch.cuda.stream(self.side)

    def wait_for_copies(self) -> None:
        torch.cuda.current_stream(self.device).wait_stream(self.side)

    def mark_used(self, tensor: torch.Tensor) -> None:
        if tensor.device.type == "cuda":
            tensor.record_stream(torch.cuda.current_stream(self.device))


class Prefetcher:
    """Iterate ``iterable`` with each batch already on ``device``, copied one batch ahead.

    Args:
        iterable: the batches (a DataLoader or any iterable), nested tuples, lists, dicts,
            namedtuples and dataclasses of tensors.
        device: where the batches go. CUDA: copies on a side stream; otherwise no-op streams.
        limit: draw at most this many batches from ``iterable`` (the epoch's batch count), so
            the read-ahead never consumes a batch the loop will not train on.
        channels_last: also put 4-D tensors in ``torch.channels_last``.
        transfer: what moves a batch instead (the module's batch-transfer hooks,
            `trainer.data.batch_transfer`), run on the side stream.

    An exception raised by ``iterable`` surfaces after the batches before it were handed out,
    exactly where the plain loop would raise it.
    """

    def __init__(
        self,
        iterable: Iterable[Any],
        device: torch.device,
        limit: int | None = None,
        channels_last: bool = False,
        transfer: Callable[[Any], Any] | None = None,
    ) -> None:
        self.iterable = iterable
        self.transfer = transfer
        self.device = torch.device(device)
        self.limit = limit
        self.channels_last = channels_last
        self._streams: _NoOpStreams | _CudaStreams = (
            _CudaStreams(self.device) if self.device.type == "cuda" else _NoOpStreams()
        )

    def __len__(self) -> int:
        n = len(self.iterable)  # type: ignore[arg-type]
        return n if self.limit is None else min(n, self.limit)

    def __iter__(self) -> Iterator[Any]:
        if self.limit is not None and self.limit <= 0:
            return
        it = iter(self.iterable)
        fetched = 0
        error: BaseException | None = None

        def fetch() -> Any:
            nonlocal fetched, error
            if self.limit is not None and fetched >= self.limit:
                return _END
            try:
                host = next(it)
            except StopIteration:
                return _END
            except Exception as exc:  # raised after the batches before it, like the plain loop
                error = exc
                return _END
            fetched += 1
            return self._copy(host)

        upcoming = fetch()
        while upcoming is not _END:
            self._streams.wait_for_copies()
            batch = upcoming
            for tensor in tensors(batch):
                self._streams.mark_used(tensor)
            upcoming = fetch()  # queue the next copy before this batch's compute is queued
            yield batch
        if error is not None:
            raise error

    def _copy(self, batch: Any) -> Any:
        if self.transfer is not None:  # the hooks' result is marked used like any batch
            with self._streams.copying():
                return self.transfer(batch)
        if _has_opaque_parts(batch):  # its tensors cannot be marked: copy on the compute stream
            return move_to_device(batch, self.device, non_blocking=False, channels_last=self.channels_last)
        non_blocking = self.device.type == "cuda"
        with self._streams.copying():
            return move_to_device(batch, self.device, non_blocking, channels_last=self.channels_last)


def prefetch_to_device(
    iterable: Iterable[Any],
    device: torch.device,
    limit: int | None = None,
    channels_last: bool = False,
    transfer: Callable[[Any], Any] | None = None,
) -> Iterable[Any] | None:
    """A `Prefetcher` over ``iterable`` when ``device`` is a CUDA device, else None (no gain on CPU)."""
    if device.type != "cuda":
        return None
    return Prefetcher(iterable, device, limit=limit, channels_last=channels_last, transfer=transfer)


def _has_opaque_parts(batch: Any) -> bool:
    """Whether the batch holds an object that moves itself (``.to``) and hides its tensors."""
    return any(
        not isinstance(leaf, torch.Tensor) and callable(getattr(leaf, "to", None)) for leaf in leaves(batch)
    )
