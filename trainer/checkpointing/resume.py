"""Exact resume: the random state that decides an epoch's order, and fast-forwarding.

At each epoch start the fit loop captures the RNG states that shuffling will draw from (torch's
global generator and any generator the loader or its sampler owns), and the position of a loader
that keeps its own (a `DALILoader`'s reader checkpoint). A checkpoint saves them with the number
of batches already trained, and the RNG and loader states of the moment it was written. Resuming mid-epoch restores the epoch-start states, builds the epoch's
loader again so it produces the *same* order, skips the trained batches at the index level (no
data is loaded for them), and then restores the RNG states of the moment of the checkpoint so
the rest of training draws what the uninterrupted run drew. Resuming at an epoch boundary
restores the states of the moment of the checkpoint, which decide the next epoch's order.
`plan_resume` makes that choice for a restored fit.

A checkpoint that records the position in samples (a `GlobalBatchSampler`) resumes on any world
size with the same global batch; `check_global_batch` refuses another one unless allowed.
`plan_resume` decides how a restored fit continues (a `ResumePlan`); the fit loop applies it.

The random states are captured and restored by `trainer.rng`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

from torch.utils.data import DataLoader, IterableDataset

from trainer.contracts.accumulation import window_start
from trainer.contracts.loader import ShardingLoader
from trainer.contracts.lightning_progress import is_lightning_fit_loop
from trainer.data.global_batch_sampler import GlobalBatchSampler
from trainer.distributed.rank_zero import rank_zero_warn
from trainer.rng import capture_generators, capture_rng_state, restore_generators, restore_rng_state
from trainer.contracts.user_line import user_stacklevel

if TYPE_CHECKING:
    from trainer.contracts.internals import TrainerInternals as Trainer
    from trainer.contracts.progress import FitProgress


def _seeded_samplers(loader: Any, unseeded: bool = False) -> list[Any]:
    # A DistributedSampler's order is (seed, epoch); its seed may come from the environment of
    # the run that built it, so it is saved rather than trusted to be the same after a restart.
    # ``unseeded``: also the samplers with a ``seed`` of None (a GlobalBatchSampler drawing its
    # order from torch's default generator), which an older checkpoint seeds again.
    batch_sampler = getattr(loader, "batch_sampler", None)
    found: list[Any] = []
    for owner in (getattr(loader, "sampler", None), batch_sampler, getattr(batch_sampler, "sampler", None)):
        seed = getattr(owner, "seed", _NO_SEED)
        if (isinstance(seed, int) or (unseeded and seed is None)) and all(owner is not f for f in found):
            found.append(owner)
    return found


_NO_SEED = object()


def capture_epoch_state(loader: Any) -> dict[str, Any]:
    """What decides this epoch's order: RNG states, the loader's generators, sampler seeds."""
    return {
        "rng": capture_rng_state(),
        "generators": capture_generators(loader),
        "sampler_seeds": [s.seed for s in _seeded_samplers(loader)],
        "loader": capture_loader_position(loader),
    }


def restore_epoch_state(loader: Any, state: dict[str, Any]) -> None:
    """Put the RNGs and sampler seeds back to where they were when the epoch started."""
    restore_rng_state(state["rng"])
    restore_generators(loader, state["generators"])
    restore_sampler_seeds(loader, state)
    restore_loader_position(loader, state.get("loader"))


def capture_loader_position(loader: Any) -> dict[str, Any] | None:
    """The position of a loader that keeps its own (a `ShardingLoader`, e.g. a `DALILoader`'s
    reader checkpoint)."""
    return loader.state_dict() if isinstance(loader, ShardingLoader) else None


def restore_loader_position(loader: Any, state: dict[str, Any] | None) -> None:
    """Undo :func:`capture_loader_position` (nothing for loaders without a position)."""
    if state is not None and isinstance(loader, ShardingLoader):
        loader.load_state_dict(state)


def restore_sampler_seeds(loader: Any, state: dict[str, Any]) -> None:
    """Give the loader's seeded samplers the seeds they had in the saved run.

    A checkpoint written before the training order was drawn from torch's default generator
    (main at b722602 and earlier) holds its GlobalBatchSampler's seed: the sampler gets it back
    and draws each epoch's order from ``seed + epoch`` as that run did, so the run resumes exactly.
    """
    saved = state.get("sampler_seeds", [])
    samplers = _seeded_samplers(loader)
    if len(saved) > len(samplers):  # written while a sampler that is unseeded now was seeded
        samplers = _seeded_samplers(loader, unseeded=True)
    for sampler, seed in zip(samplers, saved):
        if type(seed) is not int:  # a damaged or crafted file: refuse here, not at the first batch
            raise ValueError(f"The checkpoint's sampler_seeds must be ints, got {seed!r}: the file is damaged.")
        sampler.seed = seed


class _SkipBatches:
    """A batch sampler that drops the first ``skip`` batches of another, index lists only."""

    def __init__(self, batch_sampler: Iterable[list[int]], skip: int) -> None:
        self.batch_sampler = batch_sampler
        self.skip = skip

    def __iter__(self) -> Iterator[list[int]]:
        it = iter(self.batch_sampler)
        for _ in range(self.skip):
            if next(it, None) is None:
                return
        yield from it

    def __len__(self) -> int:
        return max(0, len(self.batch_sampler) - self.skip)  # type: ignore[arg-type]


def fast_forward(loader: Any, skip: int) -> Iterable[Any]:
    """An iterable over ``loader``'s epoch without its first ``skip`` batches.

    A map-style DataLoader is rebuilt around a batch sampler that skips at the index level, so
    no skipped sample is loaded. Other iterables (an ``IterableDataset``, a generator) can only
    be advanced by drawing and discarding their first batches.
    """
    if skip == 0:
        batches: Iterable[Any] = loader  # the user's loader: an iterable of batches
        return batches
    if isinstance(loader, DataLoader) and not isinstance(loader.dataset, IterableDataset) and loader.batch_sampler is not None:
        from trainer.data.distributed_sampler import rebuild_kwargs

        return DataLoader(loader.dataset, batch_sampler=_SkipBatches(loader.batch_sampler, skip), **rebuild_kwargs(loader))
    return _DiscardFirst(loader, skip)


class _DiscardFirst:
    def __init__(self, loader: Any, skip: int) -> None:
        self.loader = loader
        self.skip = skip

    def __iter__(self) -> Iterator[Any]:
        it = iter(self.loader)
        for _ in range(self.skip):
            if next(it, None) is None:
                return
        yield from it


def resumed_epoch(loader: Any, skip: int, epoch_state: dict[str, Any], rng_at_save: dict[str, Any] | None) -> Iterator[Any]:
    """Yield the rest of an interrupted epoch, in the interrupted run's order and RNG stream."""
    restore_epoch_state(loader, epoch_state)
    it = iter(fast_forward(loader, skip))
    first = next(it, _END)  # creating the iterator and the first draw consume the epoch's seeds
    if rng_at_save is not None:
        restore_rng_state(rng_at_save)
    if first is _END:
        return
    yield first
    yield from it


_END = object()


def gather_rank_states(trainer: Trainer, gather: bool = True) -> list[dict[str, Any] | None]:
    """Every rank's RNG and loader-generator states now, with its epoch's (a collective in a run;
    ``gather=False``: none, and only this rank's entry unless the fit loop has every rank's)."""
    strategy = trainer.strategy
    if gather and strategy.in_group:
        return strategy.all_gather_object(_rank_state(trainer))
    if trainer.fit_loop.rank_states_at_end is not None:
        return trainer.fit_loop.rank_states_at_end  # a save after fit: as every rank left the loop
    # Outside any fit (the group is gone) or while the run fails, only this rank's state is
    # known; the others resume with the RNG states they have.
    mine = _rank_state(trainer)
    return [mine if r == trainer.global_rank else None for r in range(trainer.world_size)]


def _rank_state(trainer: Trainer) -> dict[str, Any]:
    return {
        "epoch_state": trainer.fit_loop.epoch_state,
        "rng": capture_rng_state(),
        # what decides the next epoch's order when the checkpoint is at an epoch boundary
        "generators": capture_generators(trainer.train_dataloader),
        "loader": capture_loader_position(trainer.train_dataloader),
    }


class GlobalBatchChangedError(ValueError):
    """A resumed run's global batch differs from its checkpoint's (raised before any step)."""


def check_global_batch(saved: int | None, sampler: GlobalBatchSampler, allowed: bool) -> None:
    """The resumed epoch must have the checkpoint's global batch, unless the user allowed a change."""
    G = sampler.global_batch_size
    if saved is None or saved == G:
        return
    what = (
        f"The checkpoint was written with a global batch of {saved} samples per optimizer step; this run "
        f"has {G} (world size {sampler.num_replicas} x micro batch {sampler.batch_size} x "
        f"accumulate_grad_batches {sampler.accumulate})."
    )
    if not allowed:
        raise GlobalBatchChangedError(
            f"{what} Resuming on any world size continues the same run only with the same global batch: "
            f"choose the micro batch and accumulate_grad_batches so that world_size x micro batch x "
            f"accumulate_grad_batches = {saved}, or pass Trainer(allow_global_batch_change=True) to go on "
            "from the next unseen sample with the new global batch (a different run from there on). "
            "No step was taken."
        )
    rank_zero_warn(
        f"{what} allow_global_batch_change=True: training continues from the next unseen sample of the "
        f"epoch with {G} samples per step, so it is not the run the checkpoint came from.",
        stacklevel=user_stacklevel(),
    )


def check_shuffle(saved: bool | None, now: bool, path: str, mid_epoch: bool) -> None:
    """Warn when the train loader's ``shuffle`` is not the checkpoint's: accepted, as Lightning
    does, but never silently (mid-epoch the rest of the epoch is not the rest of its samples)."""
    if saved is None or saved == now:
        return
    what = f"Checkpoint {path!r} was written with a train loader of shuffle={saved}; this run's has shuffle={now}."
    if mid_epoch:
        rank_zero_warn(
            f"{what} The rest of the interrupted epoch follows the new order, so some of its samples are trained "
            "twice and others not at all; resume with the same shuffle to continue the same run.",
            stacklevel=user_stacklevel(),
        )
    else:
        rank_zero_warn(
            f"{what} The next epochs are drawn in the new order (the run differs from the saved one).",
            stacklevel=user_stacklevel(),
        )


class DatasetChangedError(ValueError):
    """A run resumed mid-epoch has another train dataset length than its checkpoint (raised before any step)."""


def check_dataset_size(saved: int | None, now: int | None, path: str, allowed: bool) -> bool:
    """Whether the interrupted epoch can go on: the checkpoint's dataset length is this run's.

    A changed length makes the rest of the epoch another set of samples (some trained twice,
    some never): refused, or with ``allowed`` the epoch restarts from its first batch (warned).
    """
    if saved is None or now is None or saved == now:
        return True
    what = (
        f"Checkpoint {path!r} was written in the middle of an epoch over a train dataset of {saved} "
        f"samples; this run's train dataset has {now}."
    )
    if not allowed:
        raise DatasetChangedError(
            f"{what} The rest of that epoch would not be the rest of its samples (some trained twice, some "
            "never). Resume with the same dataset, or pass Trainer(allow_dataset_change=True) to restart the "
            "interrupted epoch from its first batch over the new dataset. No step was taken."
        )
    rank_zero_warn(
        f"{what} allow_dataset_change=True: the interrupted epoch restarts from its first batch.",
        stacklevel=user_stacklevel(),
    )
    return False


@dataclasses.dataclass(frozen=True)
class ResumePlan:
    """How a restored fit continues, decided once from the checkpoint and this run's shape
    (`plan_resume`); the fit loop applies it: the position and epoch-boundary states at
    restore, the rest (``epoch_state`` onwards) when the first epoch starts."""

    warnings: tuple[str, ...] = ()  # said once (global rank 0) when the checkpoint is restored
    finished_epoch: bool = False  # the checkpoint is at an epoch's end: the next epoch follows it
    rank_state: dict[str, Any] | None = None  # this rank's saved states (None: none usable)
    restore_now: bool = False  # at an epoch boundary: restore ``rank_state``'s RNG and loader states now
    # The first epoch: None (a loader without a recorded position starts afresh), or checked
    # against this run (global batch, dataset length) and continued after what was trained.
    epoch_state: dict[str, Any] | None = None  # the interrupted epoch's order (None: a fresh epoch)
    rng: dict[str, Any] | None = None  # the RNG states of the moment of the checkpoint
    batches_done: int = 0  # continue after this many batches (a loader resumed by batches)
    samples_done: int | None = None  # continue after this many samples (a `GlobalBatchSampler`)
    global_batch_size: int | None = None  # the checkpoint's G
    dataset_size: int | None = None  # the checkpoint epoch's train dataset length
    shuffle: bool | None = None  # whether the checkpoint epoch's order was shuffled (None: not known)
    path: str = ""  # the checkpoint, named in a refusal
    checks_first_epoch: bool = False  # the first epoch checks G and the dataset length
    # A file Lightning wrote in the middle of an epoch holds no order: as Lightning resumes it,
    # the epoch goes on at this batch over the first batches of a freshly drawn order.
    new_order_start: int = 0


def plan_resume(
    checkpoint: dict[str, Any], progress: FitProgress, path: str, world_size: int, global_rank: int, by_samples: bool
) -> ResumePlan:
    """How a fit whose loop loaded ``checkpoint``'s position (``progress``) continues on this run's
    ``world_size`` (this process being ``global_rank``): a pure function of the checkpoint and the
    run's shape. ``by_samples``: the position is in samples and the train loader has a
    `GlobalBatchSampler`, so any world size continues the same order.
    """
    mid_epoch = bool(progress.batches_done) and not progress.epoch_finished
    saved_world = int(checkpoint.get("world_size", world_size))
    # the saved ranks' states, when this run can use them (the same world size, or positions in samples)
    rank_states = checkpoint.get("rank_states") if saved_world == world_size or by_samples else None
    said = [] if saved_world == world_size else [_world_size_changed(saved_world, world_size, by_samples, mid_epoch)]
    mine = rank_states[global_rank if global_rank < saved_world else 0] if rank_states is not None else None
    if not mid_epoch:
        # the next epoch starts afresh (its global batch is checked when it starts, by samples)
        return ResumePlan(
            warnings=tuple(said), finished_epoch=progress.epoch_finished, rank_state=mine,
            restore_now=mine is not None, samples_done=0 if by_samples else None,
            global_batch_size=progress.global_batch_size, shuffle=progress.shuffle, path=path,
            checks_first_epoch=by_samples,
        )
    if is_lightning_fit_loop(checkpoint.get("loops", {}).get("fit_loop", {})):
        return _lightning_mid_epoch(progress, path)
    return _mid_epoch(checkpoint, progress, rank_states, mine, said, path, by_samples)


def _mid_epoch(
    checkpoint: dict[str, Any], progress: FitProgress, rank_states: list[dict[str, Any] | None] | None,
    mine: dict[str, Any] | None, said: list[str], path: str, by_samples: bool,
) -> ResumePlan:
    """A Lockstep checkpoint written inside an epoch: the epoch goes on where every rank can, or restarts."""
    if rank_states is not None and any(s is None or s.get("epoch_state") is None for s in rank_states):
        # Every rank must make the same choice, or one resumes mid-epoch while another restarts
        # the epoch and they wait in different collectives.
        said.append(
            "The checkpoint holds the interrupted epoch's order for only some ranks (written by "
            "save_checkpoint while the run was failing, or outside a fit): the epoch restarts "
            "from its first batch on every rank."
        )
        return ResumePlan(warnings=tuple(said), path=path)
    if (mine or {}).get("epoch_state") is None:
        return ResumePlan(warnings=tuple(said), path=path)  # the epoch restarts (warned above)
    return _continue_epoch(checkpoint, progress, cast("dict[str, Any]", mine), said, path, by_samples)


def _continue_epoch(
    checkpoint: dict[str, Any], progress: FitProgress, mine: dict[str, Any], said: list[str], path: str, by_samples: bool
) -> ResumePlan:
    """The interrupted epoch goes on after its last finished window."""
    accumulate = int(checkpoint.get("accumulate_grad_batches", 1))
    start = window_start(progress.batches_done, accumulate)
    if start != progress.batches_done:
        said.append(
            f"The checkpoint was written inside an accumulation window ({progress.batches_done - start} of "
            f"{accumulate} micro batches); that window is trained again from its first micro batch."
        )
    return ResumePlan(
        warnings=tuple(said), rank_state=mine, epoch_state=mine["epoch_state"], rng=mine["rng"],
        batches_done=start, samples_done=progress.samples_done if by_samples else None,
        global_batch_size=progress.global_batch_size, dataset_size=progress.dataset_size, shuffle=progress.shuffle,
        path=path, checks_first_epoch=True,
    )


def _lightning_mid_epoch(progress: FitProgress, path: str) -> ResumePlan:
    """A file Lightning wrote inside an epoch: it records how many batches were trained, not their order."""
    warning = (
        f"Checkpoint {path!r} was written by Lightning in the middle of epoch {progress.current_epoch}, after "
        f"{progress.batches_done} batches; Lightning does not save the epoch's order, so, as Lightning's own "
        f"resume does, the epoch goes on at batch {progress.batches_done} over the first batches of a newly "
        "drawn order (some samples of the epoch are trained twice, others not at all). Resume from an "
        "end-of-epoch checkpoint to continue the same run exactly."
    )
    return ResumePlan(warnings=(warning,), path=path, new_order_start=progress.batches_done)


def _world_size_changed(saved_world: int, world_size: int, by_samples: bool, mid_epoch: bool) -> str:
    if by_samples:
        order = (
            "the data order continues exactly at the next unseen sample; random numbers drawn "
            "per rank (dropout, augmentation) follow other streams than the saved run's "
            "(docs/fault-tolerance.md)."
        )
    else:
        order = "but the data order changes" + (" and the interrupted epoch restarts from its first batch." if mid_epoch else ".")
    return (
        f"Resuming a checkpoint made with world size {saved_world} on world size "
        f"{world_size}: the module, optimizer and scheduler states are restored (the "
        "learning rates as saved, not scaled again), " + order
    )


def restore_boundary_states(loader: Any, state: dict[str, Any]) -> None:
    """At an epoch boundary: the RNG and loader states of the moment of the checkpoint, which
    decide the next epoch's order."""
    restore_rng_state(state["rng"])
    restore_generators(loader, state.get("generators", []))
    restore_loader_position(loader, state.get("loader"))
    if state.get("epoch_state") is not None:
        restore_sampler_seeds(loader, state["epoch_state"])
