"""``overfit_batches``: fit's loaders in their dataset's order, so every epoch sees the same batches."""
from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader, RandomSampler, SequentialSampler

from trainer.data.distributed_sampler import rebuild_kwargs
from trainer.distributed.rank_zero import rank_zero_warn
from trainer.contracts.user_line import user_stacklevel


def without_shuffling(loader: Any) -> Any:
    """``loader`` rebuilt with a `SequentialSampler` when it shuffles (with a warning), else itself."""
    if type(loader) is not DataLoader or not isinstance(loader.sampler, RandomSampler) or loader.batch_size is None:
        return loader
    rank_zero_warn(
        "overfit_batches: a fit dataloader shuffles; it is rebuilt without shuffling so that "
        "every epoch runs the same first batches.",
        stacklevel=user_stacklevel(),
    )
    kwargs = rebuild_kwargs(loader)
    # torch types Dataset without __len__; a shuffled map-style dataset has one (its RandomSampler took it)
    kwargs.update(sampler=SequentialSampler(loader.dataset),  # type: ignore[arg-type]
            batch_size=loader.batch_size, drop_last=loader.drop_last)
    return DataLoader(loader.dataset, **kwargs)
