"""`GlobalBatchSampler`: every step's samples and weights are the same on any world size.

Ranks are simulated in-process (one sampler per rank); the multi-process runs that train with it
are in tests/strategies/test_any_world_size.py.
"""
from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler, RandomSampler

from trainer.data.global_batch_sampler import GlobalBatchSampler
from trainer.loops.accumulation_windows import AccumulationWindows

pytestmark = pytest.mark.timeout(30)

SPLITS = [(1, 16, 1), (1, 4, 4), (2, 4, 2), (4, 4, 1), (4, 2, 2), (8, 1, 2), (16, 1, 1)]  # (W, b, A): G = 16


def _steps(n: int, world: int, batch: int, accumulate: int, **kw) -> list[list[tuple[int, float]]]:
    """Each optimizer step's (sample, weight) pairs over all ranks, in the loop's arithmetic: the
    weight a sample's loss gets in the step's gradient (1 / divisor of its micro batch's mean,
    divided by that micro batch's size and averaged over the W ranks)."""
    samplers = [GlobalBatchSampler(n, batch, num_replicas=world, rank=r, accumulate=accumulate, **kw) for r in range(world)]
    per_rank = [list(s) for s in samplers]
    assert len({len(batches) for batches in per_rank}) == 1  # every rank runs the same micro batches
    assert [len(s) for s in samplers] == [len(b) for b in per_rank]
    steps: list[list[tuple[int, float]]] = []
    for r, batches in enumerate(per_rank):
        layout = samplers[r].layout()
        windows = AccumulationWindows(accumulate, layout.num_batches, layout)
        step = 0
        for idx, micro in enumerate(batches):
            if step == len(steps):
                steps.append([])
            if not windows.is_padding(idx):
                weight = 1.0 / windows.loss_divisor(idx) / len(micro) / world
                steps[step] += [(i, weight) for i in micro]
            if windows.is_window_end(idx, idx == len(batches) - 1):
                step += 1
    return [sorted(s) for s in steps]


@pytest.mark.parametrize("n", [98, 100, 16, 5, 33])
@pytest.mark.parametrize("shuffle", [True, False])
def test_every_step_has_the_same_samples_and_true_mean_weights_on_any_world_size(n, shuffle):
    reference = _steps(n, *SPLITS[0], shuffle=shuffle, seed=7)
    assert len(reference) == -(-n // 16)
    order = [i for step in reference for i, _ in step]
    assert sorted(order) == list(range(n))  # each sample once an epoch
    for step in reference:
        assert all(w == pytest.approx(1 / len(step)) for _, w in step)  # the mean over the step's samples
    for split in SPLITS[1:]:
        steps = _steps(n, *split, shuffle=shuffle, seed=7)
        assert [[i for i, _ in s] for s in steps] == [[i for i, _ in s] for s in reference], split
        for got, want in zip(steps, reference):
            assert [w for _, w in got] == pytest.approx([w for _, w in want]), split


def test_step_s_trains_positions_s_g_to_s_plus_1_g_of_the_epoch_permutation():
    perm = torch.randperm(98, generator=torch.Generator().manual_seed(7 + 2)).tolist()
    samplers = [GlobalBatchSampler(98, 4, num_replicas=2, rank=r, accumulate=2, seed=7) for r in range(2)]
    for s in samplers:
        s.set_epoch(2)
    ranks = [list(s) for s in samplers]
    assert sorted(ranks[0][2] + ranks[0][3] + ranks[1][2] + ranks[1][3]) == sorted(perm[16:32])  # step 1
    assert ranks[0][0] == perm[0:8:2] and ranks[1][0] == perm[1:8:2]  # strided, as a DistributedSampler
    assert ranks[0][-1] == [perm[96]] and ranks[1][-1] == [perm[97]]  # the last window: 2 samples


def test_padding_micro_batches_when_a_rank_has_no_sample_of_the_last_window():
    samplers = [GlobalBatchSampler(18, 4, num_replicas=4, rank=r, shuffle=False) for r in range(4)]
    layouts = [s.layout() for s in samplers]
    assert [lay.last_counts for lay in layouts] == [(1,), (1,), (0,), (0,)]
    assert [lay.loss_weight(1) for lay in layouts] == [2.0, 2.0, 0.0, 0.0]  # W * n / R
    assert [list(s)[-1] for s in samplers] == [[16], [17], [16], [16]]  # padding: the window's first sample


def test_drop_last_drops_the_shorter_global_window():
    sampler = GlobalBatchSampler(98, 4, num_replicas=2, rank=1, accumulate=2, drop_last=True, shuffle=False)
    assert len(sampler) == 6 * 2 and max(i for b in sampler for i in b) < 96


@pytest.mark.parametrize("drop_last", [False, True])
def test_the_users_generator_draws_each_epochs_permutation_as_a_random_sampler_does(drop_last):
    mine, users = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    ours = GlobalBatchSampler(22, 4, generator=mine, drop_last=drop_last)
    theirs = BatchSampler(RandomSampler(range(22), generator=users), 4, drop_last=drop_last)
    for _ in range(3):  # a RandomSampler draws a second (empty) permutation when its epoch ends
        assert list(ours) == list(theirs)
    assert torch.equal(mine.get_state(), users.get_state())


def test_without_a_generator_each_epoch_draws_its_seed_from_the_default_generator():
    ours = GlobalBatchSampler(22, 4)
    theirs = BatchSampler(RandomSampler(range(22)), 4, drop_last=False)
    torch.manual_seed(11)
    mine = [list(ours) for _ in range(3)]
    after = torch.get_rng_state()
    torch.manual_seed(11)
    assert mine == [list(theirs) for _ in range(3)] and torch.equal(after, torch.get_rng_state())


def test_every_rank_takes_rank_0s_seed():
    drawn = []

    def rank0(seed):  # what the strategy's broadcast does: rank 0's seed everywhere
        drawn.append(seed)
        return drawn[0]

    samplers = [GlobalBatchSampler(22, 2, num_replicas=2, rank=r, share_seed=rank0) for r in range(2)]
    shards = [[i for b in s for i in b] for s in samplers]
    assert len(set(drawn)) == 2  # each simulated rank drew its own, from the one default generator
    assert sorted(shards[0] + shards[1]) == list(range(22))


@pytest.mark.parametrize("world, batch, accumulate", SPLITS)
def test_start_at_continues_at_the_next_unseen_sample(world, batch, accumulate):
    full = _steps(98, world, batch, accumulate, seed=1)
    samplers = [GlobalBatchSampler(98, batch, num_replicas=world, rank=r, accumulate=accumulate, seed=1) for r in range(world)]
    for s in samplers:
        s.start_at(48)
    layout = samplers[0].layout()
    assert layout.first_batch == 3 * accumulate and layout.num_batches == len(samplers[0]) == 7 * accumulate - (accumulate - 1)
    rest = sorted(i for s in samplers for idx, b in enumerate(s, layout.first_batch) if s.layout().loss_weight(idx) != 0.0 for i in b)
    assert rest == sorted(i for step in full[3:] for i, _ in step)  # padding micro batches left out
    assert layout.samples_through(layout.first_batch + accumulate - 1) == 64


def test_another_global_batch_continues_from_the_next_unseen_sample():
    """After 48 samples at G=16, G=12 lays its windows from sample 48 on: nothing repeated, nothing skipped."""
    first = [i for step in _steps(98, 2, 4, 2, seed=1)[:3] for i, _ in step]
    samplers = [GlobalBatchSampler(98, 3, num_replicas=2, rank=r, accumulate=2, seed=1) for r in range(2)]
    for s in samplers:
        s.start_at(48)
    rest = [i for s in samplers for b in s for i in b]
    assert sorted(first + rest) == list(range(98))
    assert samplers[0].layout().first_batch == 4 * 2  # 48 // 12 windows before


@pytest.mark.parametrize("world, batch, accumulate", SPLITS)
@pytest.mark.parametrize("start, drop_last", [(0, False), (48, False), (0, True), (37, True)])
def test_the_windows_count_the_samples_the_layout_counts(world, batch, accumulate, start, drop_last):
    """`AccumulationWindows.samples_through` (the step's position, computed inline) is the layout's."""
    sampler = GlobalBatchSampler(98, batch, num_replicas=world, accumulate=accumulate, drop_last=drop_last)
    sampler.start_at(start)
    layout = sampler.layout()
    windows = AccumulationWindows(accumulate, layout.num_batches, layout)
    for idx in range(layout.first_batch, layout.num_batches):
        assert windows.samples_through(idx) == layout.samples_through(idx)
