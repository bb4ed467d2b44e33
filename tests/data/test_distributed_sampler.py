"""Sharding of DataLoaders; ranks are simulated by building the sampler with rank=0/1 in-process."""
from __future__ import annotations

import inspect
import multiprocessing
import warnings

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from trainer.data.distributed_sampler import UnpaddedDistributedSampler, distribute_dataloader, set_epoch
from trainer.data.global_batch_sampler import GlobalBatchSampler

pytestmark = pytest.mark.timeout(20)


class _Range(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(range(4))


class _EveryOther(Sampler):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(0, self.n, 2))

    def __len__(self):
        return (self.n + 1) // 2


def _collate(batch):
    return batch


def _worker_init(worker_id):
    pass


def _indices(loader):
    return [i for batch in loader for i in (batch.tolist() if torch.is_tensor(batch) else [batch])]


def _rank0_seed(seed):
    # What the strategy's broadcast gives every rank of a shuffled training loader: one seed (here
    # the ranks are simulated in one process, each drawing its own from the default generator).
    return 1234


def _shards(loader, world_size=2, **kwargs):
    return [
        _indices(distribute_dataloader(loader, num_replicas=world_size, rank=r, share_seed=_rank0_seed, **kwargs))
        for r in range(world_size)
    ]


# ----------------------------------------------------------------------------------------------
# UnpaddedDistributedSampler
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 5, 7, 10])
@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("shuffle", [False, True])
def test_unpadded_shards_cover_the_dataset_exactly_once(n, world_size, shuffle):
    samplers = [
        UnpaddedDistributedSampler(_Range(n), world_size, r, shuffle=shuffle, seed=3)
        for r in range(world_size)
    ]
    shards = [list(s) for s in samplers]
    assert sorted(i for shard in shards for i in shard) == list(range(n))
    assert [len(s) for s in samplers] == [len(shard) for shard in shards]
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    assert isinstance(samplers[0], DistributedSampler)


@pytest.mark.parametrize("n", [0, 1, 5, 7, 10, 21])
@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("shuffle", [False, True])
def test_contiguous_shards_concatenated_in_rank_order_are_the_index_order(n, world_size, shuffle):
    def samplers(contiguous):
        return [
            UnpaddedDistributedSampler(_Range(n), world_size, r, shuffle=shuffle, seed=3,
                                       contiguous=contiguous)
            for r in range(world_size)
        ]

    blocks = [list(s) for s in samplers(contiguous=True)]
    strided = [list(s) for s in samplers(contiguous=False)]
    order = [i for r in range(max(n, 1)) for shard in strided for i in shard[r : r + 1]]  # the sampled order
    assert [i for block in blocks for i in block] == order
    assert [len(s) for s in samplers(contiguous=True)] == [len(b) for b in blocks]
    assert max(map(len, blocks)) - min(map(len, blocks)) <= 1 and len(blocks[0]) >= len(blocks[-1])
    assert list(UnpaddedDistributedSampler(_Range(21), 2, 1, contiguous=True)) == list(range(11, 21))


def test_unpadded_set_epoch_reshuffles_consistently_across_ranks():
    samplers = [UnpaddedDistributedSampler(_Range(9), 2, r, shuffle=True) for r in range(2)]
    epoch0 = [list(s) for s in samplers]
    for s in samplers:
        s.set_epoch(1)
    epoch1 = [list(s) for s in samplers]
    assert epoch0 != epoch1
    assert sorted(epoch1[0] + epoch1[1]) == list(range(9))
    assert list(UnpaddedDistributedSampler(_Range(9), 2, 0)) == [0, 2, 4, 6, 8]  # no shuffle by default


def test_unpadded_rejects_bad_rank():
    with pytest.raises(ValueError, match=r"rank=2 must be in 0\.\.1 for num_replicas=2"):
        UnpaddedDistributedSampler(_Range(4), 2, 2)
    with pytest.raises(ValueError, match=r"num_replicas must be an int >= 1, got 0"):
        UnpaddedDistributedSampler(_Range(4), 0, 0)


# ----------------------------------------------------------------------------------------------
# distribute_dataloader
# ----------------------------------------------------------------------------------------------
def test_training_shards_are_disjoint_and_cover_the_dataset():
    loader = DataLoader(_Range(10), batch_size=3, shuffle=True)
    shards = _shards(loader)
    assert sorted(shards[0] + shards[1]) == list(range(10))
    assert shards[0] != sorted(shards[0])  # RandomSampler -> shuffled
    new = distribute_dataloader(loader, num_replicas=2, rank=0)
    assert type(new.batch_sampler) is GlobalBatchSampler and new.batch_sampler.shuffle


def test_neither_training_nor_evaluation_pads_odd_sizes():
    loader = DataLoader(_Range(7), batch_size=2)
    assert _shards(loader) == [[0, 2, 4, 6], [1, 3, 5]]  # the last global window split unevenly
    exact = _shards(loader, evaluation=True)
    assert exact == [[0, 2, 4, 6], [1, 3, 5]]  # SequentialSampler -> not shuffled
    new = distribute_dataloader(loader, num_replicas=2, rank=1, evaluation=True)
    assert type(new.sampler) is UnpaddedDistributedSampler


def test_shuffle_argument_overrides_the_original_sampler():
    assert _shards(DataLoader(_Range(8)), shuffle=False)[0] == [0, 2, 4, 6]
    shuffled = _shards(DataLoader(_Range(8)), shuffle=True, seed=1)
    assert shuffled[0] != sorted(shuffled[0]) and sorted(shuffled[0] + shuffled[1]) == list(range(8))
    assert _shards(DataLoader(_Range(8), shuffle=True), shuffle=False)[1] == [1, 3, 5, 7]


def test_each_epoch_is_drawn_from_the_default_generator_as_a_random_sampler_draws_it():
    plain = DataLoader(_Range(32), batch_size=4, shuffle=True)
    loader = distribute_dataloader(plain, num_replicas=1, rank=0)
    torch.manual_seed(3)
    ours = [_indices(loader) for _ in range(3)]
    after_ours = torch.get_rng_state()
    torch.manual_seed(3)
    theirs = [_indices(plain) for _ in range(3)]
    assert ours == theirs and len({tuple(o) for o in ours}) == 3
    assert torch.equal(after_ours, torch.get_rng_state())  # the same draws, no more


def test_set_epoch_changes_the_order_of_a_fixed_seed():
    sampler = GlobalBatchSampler(32, 4, seed=5)
    sampler.set_epoch(0)
    epoch0 = [i for b in sampler for i in b]
    assert [i for b in sampler for i in b] == epoch0  # same epoch, same order
    sampler.set_epoch(1)
    assert [i for b in sampler for i in b] != epoch0


def test_every_dataloader_setting_survives():
    generator = torch.Generator().manual_seed(5)
    settings = dict(
        batch_size=3, num_workers=2, collate_fn=_collate, pin_memory=True, drop_last=True, timeout=7.0,
        worker_init_fn=_worker_init, multiprocessing_context="spawn", generator=generator,
        persistent_workers=True, prefetch_factor=5,
    )
    if "in_order" in inspect.signature(DataLoader.__init__).parameters:  # torch >= 2.6
        settings["in_order"] = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pin_memory_device is deprecated in recent torch
        loader = DataLoader(_Range(10), shuffle=True, pin_memory_device="cpu", **settings)
        new = distribute_dataloader(loader, num_replicas=2, rank=1)
    assert isinstance(new.batch_sampler, GlobalBatchSampler) and new.batch_sampler.rank == 1
    assert new.batch_sampler.generator is generator  # the permutation is drawn from the user's generator
    for name, value in settings.items():
        if name in ("batch_size", "drop_last"):
            assert getattr(new.batch_sampler, name) == value, name
        elif name == "multiprocessing_context":
            assert new.multiprocessing_context is multiprocessing.get_context("spawn")
        else:
            assert getattr(new, name) == value, name
    assert new.pin_memory_device == "cpu"


def test_plain_batch_sampler_is_rebuilt_as_a_global_batch_sampler():
    loader = DataLoader(_Range(10), batch_sampler=BatchSampler(RandomSampler(_Range(10)), 3, drop_last=True))
    new = distribute_dataloader(loader, num_replicas=2, rank=0)
    assert type(new.batch_sampler) is GlobalBatchSampler
    assert (new.batch_sampler.batch_size, new.batch_sampler.drop_last, new.batch_sampler.shuffle) == (3, True, True)
    assert [len(b) for b in new] == [3]  # one global window of 6, the last 4 samples dropped


def test_unbatched_loader_stays_unbatched():
    shards = _shards(DataLoader(_Range(5), batch_size=None), evaluation=True)
    assert shards == [[0, 2, 4], [1, 3]]


def test_already_distributed_and_iterable_loaders_are_returned_unchanged():
    dataset = _Range(6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for loader in (
            DataLoader(dataset, sampler=DistributedSampler(dataset, num_replicas=2, rank=0)),
            DataLoader(dataset, batch_sampler=_batched_unpadded(dataset)),
            DataLoader(_Stream(), batch_size=2),
        ):
            assert distribute_dataloader(loader, num_replicas=2, rank=0) is loader


def _batched_unpadded(dataset):
    return BatchSampler(UnpaddedDistributedSampler(dataset, 2, 0), 2, drop_last=True)


class _MyLoader(DataLoader):
    pass


@pytest.mark.parametrize(
    "make, what",
    [
        (lambda d: DataLoader(d, sampler=_EveryOther(6)), r"uses a custom sampler \(_EveryOther\)"),
        (lambda d: DataLoader(d, batch_sampler=BatchSampler(_EveryOther(6), 2, False)), r"a custom sampler"),
        (lambda d: DataLoader(d, batch_sampler=[[0, 1], [2]]), r"a custom batch_sampler \(list\)"),
        (
            lambda d: DataLoader(d, sampler=RandomSampler(d, replacement=True)),
            r"a RandomSampler with replacement",
        ),
        (lambda d: _MyLoader(d), r"a DataLoader subclass \(_MyLoader\)"),
        (lambda d: [[0, 1], [2, 3]], r"a plain iterable \(list\), not a DataLoader"),
    ],
)
def test_custom_samplers_are_kept_with_a_warning(make, what):
    loader = make(_Range(6))
    expected = f"{what}.*EACH OF THE 2 RANKS WILL SEE THE FULL DATA"
    with pytest.warns(UserWarning, match=expected) as record:
        assert distribute_dataloader(loader, num_replicas=2, rank=0) is loader
    assert "sampler=DistributedSampler(dataset)" in str(record[0].message)


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"rank=-1 must be in 0\.\.1 for num_replicas=2"):
        distribute_dataloader(DataLoader(_Range(2)), num_replicas=2, rank=-1)
    with pytest.raises(ValueError, match="num_replicas must be an int >= 1, got 0"):
        distribute_dataloader(DataLoader(_Range(2)), num_replicas=0, rank=0)


# ----------------------------------------------------------------------------------------------
# set_epoch
# ----------------------------------------------------------------------------------------------
class _Epochs:
    def __init__(self, sampler=None):
        self.epochs = []
        self.sampler = sampler

    def set_epoch(self, epoch):
        self.epochs.append(epoch)

    def __iter__(self):
        return iter([])


def test_set_epoch_reaches_sampler_batch_sampler_and_inner_sampler():
    inner = _Epochs()
    outer = _Epochs(sampler=inner)
    loader = DataLoader(_Range(4), batch_sampler=outer)
    set_epoch(loader, 3)
    assert outer.epochs == [3] and inner.epochs == [3]
    shared = DistributedSampler(_Range(4), num_replicas=2, rank=0)
    set_epoch(DataLoader(_Range(4), sampler=shared, batch_size=2), 2)  # sampler is batch_sampler.sampler
    assert shared.epoch == 2
    set_epoch([1, 2, 3], 1)  # anything without samplers is ignored


def test_the_rebuilt_loader_keeps_collate_fn_when_a_library_wrapped_dataloader_init(monkeypatch):
    # libraries (and the census harness) wrap DataLoader.__init__ as (*args, **kwargs): the rebuilt
    # loader must still keep the user's collate_fn, workers and the rest
    original = DataLoader.__init__

    def wrapped(self, *args, **kwargs):
        original(self, *args, **kwargs)

    monkeypatch.setattr(DataLoader, "__init__", wrapped)

    def collate(items):
        return ("collated", len(items))

    loader = DataLoader(list(range(10)), batch_size=4, shuffle=True, collate_fn=collate)
    rebuilt = distribute_dataloader(loader, num_replicas=1, rank=0)
    assert rebuilt is not loader and rebuilt.collate_fn is collate
    assert [b for b in rebuilt] == [("collated", 4), ("collated", 4), ("collated", 2)]
