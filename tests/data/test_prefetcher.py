"""The CUDA prefetcher: same batches, same order, as the plain path; correct stream handling on CUDA.

On CPU the `Prefetcher` runs its logic with no-op streams, so these tests prove the batch
handling (nesting, order, limits, errors, the fit loop's look-ahead) without a GPU. The tests
marked ``cuda`` check the side stream, pinned loaders and the absence of per-step syncs.
"""
from __future__ import annotations

import dataclasses
from collections import namedtuple
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import Trainer
from trainer.accelerators.accelerator import Accelerator, move_to_device
from trainer.data.loaders import iterate_with_lookahead
from trainer.data.prefetcher import Prefetcher, prefetch_to_device

pytestmark = pytest.mark.timeout(60)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

Pair = namedtuple("Pair", ["left", "right"])


@dataclasses.dataclass
class Sample:
    image: torch.Tensor
    label: torch.Tensor
    name: str = "x"


class _Nested(Dataset):
    """Samples nesting tuples, dicts, namedtuples, dataclasses and non-tensor leaves."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> Any:
        g = torch.Generator().manual_seed(i)
        return {
            "pair": Pair(torch.randn(3, generator=g), torch.tensor(i)),
            "sample": Sample(torch.randn(2, 4, 4, generator=g), torch.tensor([i, -i])),
            "list": [torch.full((2,), float(i)), ("tag", i)],
        }


def _collate(samples: list[Any]) -> list[Any]:
    return samples  # keep the nesting as is: the batch is a list of nested samples


def _assert_same(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert a.device == b.device and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            _assert_same(getattr(a, f.name), getattr(b, f.name))
    else:
        assert a == b


def _nested_loader() -> DataLoader:
    return DataLoader(_Nested(), batch_size=3, collate_fn=_collate)


def test_cpu_prefetcher_yields_the_plain_batches_in_order():
    plain = list(_nested_loader())
    prefetched = list(Prefetcher(_nested_loader(), torch.device("cpu")))
    assert len(prefetched) == len(plain) == 4
    for a, b in zip(prefetched, plain):
        _assert_same(a, b)


def _stack_into_dataclass(samples: list[Any]) -> dict[str, Any]:
    """A collate that stacks the samples into one dataclass batch (plus a namedtuple)."""
    return {
        "sample": Sample(torch.stack([s["sample"].image for s in samples]),
                         torch.stack([s["sample"].label for s in samples]), name="batch"),
        "pair": Pair(torch.stack([s["pair"].left for s in samples]), [s["pair"].right for s in samples]),
    }


def test_collated_dataclass_batches_are_kept():
    plain = list(DataLoader(_Nested(), batch_size=4, collate_fn=_stack_into_dataclass))
    prefetched = list(Prefetcher(DataLoader(_Nested(), batch_size=4, collate_fn=_stack_into_dataclass),
                                 torch.device("cpu")))
    assert len(prefetched) == len(plain) == 3
    for a, b in zip(prefetched, plain):
        _assert_same(a, b)


@pytest.mark.parametrize("limit", [None, 1, 2, 3, 4, 9])
def test_works_under_the_fit_loops_lookahead(limit):
    plain = list(iterate_with_lookahead(_nested_loader(), limit))
    via = list(iterate_with_lookahead(Prefetcher(_nested_loader(), torch.device("cpu"), limit=limit), limit))
    assert [(i, last) for i, _, last in via] == [(i, last) for i, _, last in plain]
    for (_, a, _), (_, b, _) in zip(via, plain):
        _assert_same(a, b)


class _Counting:
    """An iterable that counts the items drawn from it (what the read-ahead consumes)."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at, self.drawn = n, fail_at, 0

    def __iter__(self):
        for i in range(self.n):
            if i == self.fail_at:
                raise RuntimeError(f"bad batch {i}")
            self.drawn += 1
            yield (torch.tensor([i]),)


def test_limit_bounds_the_read_ahead():
    source = _Counting(10)
    prefetcher = Prefetcher(source, torch.device("cpu"), limit=3)
    out = [int(b[0]) for _, b, _ in iterate_with_lookahead(prefetcher, 3)]
    assert out == [0, 1, 2]
    assert source.drawn == 3  # never a batch the loop does not train on
    assert len(Prefetcher(range(10), torch.device("cpu"), limit=3)) == 3


def test_loader_error_surfaces_after_the_batches_before_it():
    seen = []
    with pytest.raises(RuntimeError, match="bad batch 2"):
        for batch in Prefetcher(_Counting(5, fail_at=2), torch.device("cpu")):
            seen.append(int(batch[0]))
    assert seen == [0, 1]


class _MovesItself:
    def __init__(self) -> None:
        self.moved_to: list[torch.device] = []

    def to(self, device: torch.device) -> "_MovesItself":
        self.moved_to.append(torch.device(device))
        return self


def test_objects_that_move_themselves_are_moved():
    item = _MovesItself()
    (batch,) = list(Prefetcher([(torch.ones(2), item)], torch.device("cpu")))
    assert batch[1] is item and item.moved_to == [torch.device("cpu")]


def test_only_cuda_gets_a_prefetcher():
    assert prefetch_to_device([1, 2], torch.device("cpu")) is None


def test_channels_last_applies_to_4d_tensors_only():
    batch = {"image": torch.randn(2, 3, 4, 5), "vector": torch.randn(2, 3)}
    moved = move_to_device(batch, torch.device("cpu"), channels_last=True)
    assert moved["image"].is_contiguous(memory_format=torch.channels_last)
    assert not moved["image"].is_contiguous()
    assert torch.equal(moved["image"], batch["image"]) and moved["vector"] is batch["vector"]


def test_pin_loader_memory_only_on_cuda_and_only_unpinned_dataloaders():
    data = regression_data(8)
    assert not Accelerator("cpu").pin_loader_memory(loader(data, 2))
    cuda = Accelerator("cuda")  # no device needed: only the loader's setting changes
    plain = loader(data, 2)
    assert cuda.pin_loader_memory(plain) and plain.pin_memory
    assert not cuda.pin_loader_memory(plain)  # already pinned
    assert not cuda.pin_loader_memory([(torch.ones(1),)])  # not a DataLoader
    started = DataLoader(data, batch_size=2, num_workers=1, persistent_workers=True)
    started._iterator = object()  # persistent workers already read the setting
    assert not cuda.pin_loader_memory(started) and not started.pin_memory


def test_cpu_fit_leaves_loaders_unpinned_and_does_not_prefetch():
    data = regression_data(16)
    train = loader(data, 4)
    t = Trainer(max_epochs=1, accelerator="cpu", **QUIET)
    t.fit(Regression(), train)
    assert not train.pin_memory and not t.fit_loop.prefetching


# -- CUDA ----------------------------------------------------------------------------------------
def _clone(batch: Any) -> Any:
    """A deep copy of a nested batch's tensors, made by kernels on the current stream."""
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    if isinstance(batch, dict):
        return {k: _clone(v) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_clone(v) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_clone(v) for v in batch)
    if dataclasses.is_dataclass(batch):
        fields = dataclasses.fields(batch)
        return dataclasses.replace(batch, **{f.name: _clone(getattr(batch, f.name)) for f in fields})
    return batch


@pytest.mark.cuda
@needs_cuda
def test_cuda_prefetcher_matches_plain_copies_while_the_compute_stream_lags():
    device = torch.device("cuda", torch.cuda.current_device())
    source = DataLoader(_Nested(), batch_size=3, collate_fn=_collate, pin_memory=True)
    plain = [move_to_device(b, device) for b in DataLoader(_Nested(), batch_size=3, collate_fn=_collate)]
    prefetcher = Prefetcher(source, device)
    assert prefetcher._streams.side != torch.cuda.current_stream(device)
    got = []
    for batch in prefetcher:
        # Keep the compute stream busy, then read the batch there and drop it: without
        # wait_stream the read could see an unfinished copy, without record_stream the next copy
        # could reuse the batch's memory before the read ran.
        torch.cuda._sleep(50_000_000)
        got.append(_clone(batch))
        del batch
    torch.cuda.synchronize(device)
    assert len(got) == len(plain)
    for a, b in zip(got, plain):
        _assert_same(a, b)


@pytest.mark.cuda
@needs_cuda
def test_cuda_fit_pins_prefetches_and_trains_like_the_plain_path(monkeypatch):
    import trainer.loops.fit_loop as fit_loop

    data = regression_data(64)
    runs = {}
    for prefetch in (False, True):
        if not prefetch:  # the plain path: batches moved by the loop, loaders unpinned
            monkeypatch.setattr(fit_loop, "prefetch_to_device", lambda *args, **kwargs: None)
        else:
            monkeypatch.undo()
        train = loader(data, 8)
        t = Trainer(max_epochs=2, accelerator="cuda", devices=1, pin_memory=prefetch, **QUIET)
        module = Regression()
        t.fit(module, train)
        assert t.fit_loop.prefetching is prefetch and train.pin_memory is prefetch
        runs[prefetch] = [p.detach().cpu() for p in module.parameters()]
    for a, b in zip(runs[True], runs[False]):
        assert torch.equal(a, b)


@pytest.mark.cuda
@needs_cuda
def test_cuda_training_step_has_no_host_device_sync():
    from callbacks.callback import Callback

    class _ForbidSync(Callback):
        """Makes any host-device sync between a batch's start and its end an error."""

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx >= 1:  # the first step allocates and initialises optimizer state
                torch.cuda.set_sync_debug_mode("error")

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, idx: int) -> None:
            torch.cuda.set_sync_debug_mode(0)

    class _SGD(Regression):
        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    t = Trainer(max_epochs=1, accelerator="cuda", devices=1, log_every_n_steps=1000,
                callbacks=[_ForbidSync()], **QUIET)
    try:
        t.fit(_SGD(), loader(regression_data(64), 8))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert t.global_step == 8
