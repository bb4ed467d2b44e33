"""`plan_resume`: how a restored fit continues, as a pure function of the checkpoint and the run's
shape (no Trainer, no loader), so each decision is checked on its own."""
from __future__ import annotations

import dataclasses

import pytest

from trainer.checkpointing.resume import ResumePlan, plan_resume
from trainer.contracts.progress import FitProgress


def _checkpoint(batches_done, finished=False, world_size=2, accumulate=1, states=("a", "b"), samples=None):
    ranks = [None if s is None else {"epoch_state": {"epoch_of": s}, "rng": {"rng_of": s}} for s in states]
    position = {"batches_done": batches_done, "epoch_finished": finished}
    if samples is not None:
        position.update(samples_done=samples, global_batch_size=16, dataset_size=96)
    return {"epoch": 1, "global_step": 7, "loops": {"fit_loop": position}, "world_size": world_size,
            "accumulate_grad_batches": accumulate, "rank_states": ranks}


def _plan(checkpoint, world_size=2, rank=0, by_samples=False):
    progress = FitProgress.from_state_dict(checkpoint)
    before = dataclasses.asdict(progress)
    plan = plan_resume(checkpoint, progress, "x.ckpt", world_size, rank, by_samples)
    assert dataclasses.asdict(progress) == before  # pure: the loaded position is only read
    return plan


def test_mid_epoch_continues_this_ranks_order_after_the_trained_batches():
    plan = _plan(_checkpoint(6), rank=1)
    assert (plan.epoch_state, plan.rng, plan.batches_done) == ({"epoch_of": "b"}, {"rng_of": "b"}, 6)
    assert plan.checks_first_epoch and not plan.restore_now and not plan.finished_epoch and plan.warnings == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.batches_done = 0  # type: ignore[misc]


def test_inside_an_accumulation_window_the_window_is_trained_again():
    plan = _plan(_checkpoint(5, accumulate=2))
    assert plan.batches_done == 4 and "inside an accumulation window (1 of 2 micro batches)" in plan.warnings[0]


def test_at_an_epoch_end_the_next_epoch_follows_with_the_saved_states():
    plan = _plan(_checkpoint(12, finished=True))
    assert plan.finished_epoch and plan.restore_now and plan.rank_state["rng"] == {"rng_of": "a"}
    assert plan.epoch_state is None and not plan.checks_first_epoch  # a loader resumed by batches
    by_samples = _plan(_checkpoint(12, finished=True, samples=96), by_samples=True)
    assert by_samples.checks_first_epoch and by_samples.samples_done == 0 and by_samples.global_batch_size == 16


def test_another_world_size_continues_by_samples_from_rank_0s_states_where_the_saved_run_had_fewer():
    plan = _plan(_checkpoint(6, samples=48), world_size=4, rank=3, by_samples=True)
    assert plan.epoch_state == {"epoch_of": "a"} and plan.samples_done == 48 and plan.dataset_size == 96
    assert "made with world size 2 on world size 4" in plan.warnings[0] and "continues exactly" in plan.warnings[0]
    # by batches another world size cannot keep the order: the epoch restarts, said so
    plan = _plan(_checkpoint(6), world_size=4, rank=3)
    assert plan == ResumePlan(warnings=plan.warnings, path="x.ckpt") and "restarts from its first batch" in plan.warnings[0]


def test_an_order_kept_for_only_some_ranks_restarts_the_epoch_on_every_rank():
    for rank in (0, 1):
        plan = _plan(_checkpoint(6, states=("a", None)), rank=rank)
        assert plan.epoch_state is None and not plan.checks_first_epoch
        assert "only some ranks" in plan.warnings[0]


def test_a_checkpoint_whose_sampler_seed_is_not_an_int_is_refused_naming_it():
    from torch.utils.data import DataLoader

    from trainer.checkpointing.resume import restore_sampler_seeds
    from trainer.data.distributed_sampler import distribute_dataloader

    loader = distribute_dataloader(DataLoader(list(range(10)), batch_size=2, shuffle=True), num_replicas=1, rank=0)
    with pytest.raises(ValueError, match="sampler_seeds must be ints, got 'x'"):
        restore_sampler_seeds(loader, {"sampler_seeds": ["x"]})
    restore_sampler_seeds(loader, {"sampler_seeds": [7]})  # an old run's seed: its order from 7 + epoch
    assert loader.batch_sampler.seed == 7
