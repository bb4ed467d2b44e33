"""What `TrainModule.log` records: per-step values and batch-size-weighted epoch aggregates.

Values stay tensors on their device; nothing is read back to the host until it is logged or
shown, so logging adds no host-device sync to a training step. A logged torchmetrics ``Metric``
accumulates itself: it is computed (and synced over ranks, by itself) at the epoch end, then
reset. torchmetrics is never imported here: a Metric exists only if the user imported it.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Any, Callable

import torch

from trainer.data.batch import batch_size as batch_size_of
from trainer.distributed.rank_zero import rank_zero_warn
from trainer.contracts.user_line import user_stacklevel

if TYPE_CHECKING:
    from trainer.contracts.internals import StrategyInternals as Strategy

_REDUCTIONS = ("mean", "sum", "max", "min")
_REDUCTION_FNS = {torch.mean: "mean", torch.sum: "sum", torch.max: "max", torch.min: "min"}


def reduction_name(name: str, reduce_fx: Any) -> str:
    """``reduce_fx`` as one of `_REDUCTIONS` (a name, or torch.mean/sum/max/min as in Lightning)."""
    if isinstance(reduce_fx, str) and reduce_fx in _REDUCTIONS:
        return reduce_fx
    if callable(reduce_fx) and reduce_fx in _REDUCTION_FNS:
        return _REDUCTION_FNS[reduce_fx]
    raise ValueError(
        f"self.log({name!r}, reduce_fx={reduce_fx!r}): use one of {_REDUCTIONS} "
        "or torch.mean / torch.sum / torch.max / torch.min"
    )


@dataclasses.dataclass
class _Entry:
    on_step: bool
    on_epoch: bool
    prog_bar: bool
    sync_dist: bool
    reduce: str
    last: torch.Tensor | None  # None: a Metric logged on_epoch only (no step value)
    total: torch.Tensor | None = None  # weighted sum (mean), sum, or running max/min
    weight: float = 0.0  # sum of batch sizes, a host number: no device op to keep it
    logger: bool = True  # False: callback metrics and progress bar only
    metric: Any = None  # a torchmetrics Metric: it aggregates (and syncs) itself


class MetricStore:
    """The metrics of one stage (training, or one evaluation run)."""

    def __init__(self, training: bool) -> None:
        self.training = training
        self.in_step = False  # inside a batch: `log` defaults to on_step for training
        # between the first batch and the end of the batches: the views show step values, after
        # them epoch aggregates (Lightning's ``_first_loop_iter is not None``)
        self.stepping = False
        self.dataloader_suffix = ""
        # set under the runner on several ranks (trainer.metrics.metric_logger): a value logged on_step with
        # sync_dist is reduced as it is logged, as Lightning's; Lockstep's own reduces it when published
        self.step_sync: Callable[[torch.Tensor, str], torch.Tensor] | None = None
        self._entries: dict[str, _Entry] = {}
        self.aggregates: dict[str, torch.Tensor] = {}  # what `epoch_values` last returned
        self._batch: Any = None
        self._batch_size: int | None = None
        self._batch_size_known = False

    def set_batch(self, batch: Any) -> None:
        """The batch being processed (its size weights epoch means; computed only if needed)."""
        self._batch = batch
        self._batch_size_known = False
        self.stepping = True

    @property
    def batch_size(self) -> int | None:
        """The size of the batch being processed, as `trainer.data.batch.batch_size` reads it
        (None without tensors); computed once per batch, for ``self.log`` and ThroughputMonitor."""
        if not self._batch_size_known:
            self._batch_size = batch_size_of(self._batch)
            self._batch_size_known = True
        return self._batch_size

    def log(
        self,
        name: str,
        value: Any,
        *,
        prog_bar: bool,
        logger: bool = True,
        on_step: bool | None,
        on_epoch: bool | None,
        sync_dist: bool,
        reduce: str | Callable[..., Any],
        batch_size: int | None,
    ) -> None:
        """Record one value (see `TrainModule.log`)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"self.log needs a non-empty string name, got {name!r}")
        # the common call (a reduction by name, default on_step/on_epoch, a 0-d tensor) runs inline:
        # `self.log` is called in every training step
        if reduce.__class__ is not str or reduce not in _REDUCTIONS:
            reduce = reduction_name(name, reduce)
        if on_step is None and on_epoch is None:
            on_step = self.training and self.in_step
            on_epoch = not on_step
        else:
            on_step, on_epoch = self._when(name, on_step, on_epoch)
        metric: Any = None
        tensor: torch.Tensor | None
        if value.__class__ is torch.Tensor and value.dim() == 0:  # a plain tensor is never a Metric
            tensor = value.detach()
        else:
            metric, tensor = _metric_or_tensor(name, value, on_step)
        key = name + self.dataloader_suffix
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _new_entry(on_step, on_epoch, prog_bar, logger, sync_dist, reduce, metric)
        entry.last = tensor
        if on_epoch and metric is None and tensor is not None:
            _accumulate(entry, tensor, self.batch_size if batch_size is None else batch_size)

    def reduce_step_value(self, name: str) -> None:
        """Reduce the step value just logged as ``name`` over ranks now (`step_sync`), as Lightning's
        ``self.log(sync_dist=True)`` does; the epoch's accumulation keeps this rank's value."""
        e = self._entries[name + self.dataloader_suffix]
        if e.on_step and e.metric is None and e.last is not None and self.step_sync is not None:
            e.last = self.step_sync(e.last, e.reduce)

    def _when(self, name: str, on_step: bool | None, on_epoch: bool | None) -> tuple[bool, bool]:
        """``on_step`` / ``on_epoch`` with Lightning's defaults: per step inside a training step, else per epoch."""
        step_default = self.training and self.in_step
        on_step = step_default if on_step is None else on_step
        on_epoch = (not step_default) if on_epoch is None else on_epoch
        if not (on_step or on_epoch):
            raise ValueError(f"self.log({name!r}): at least one of on_step / on_epoch must be True")
        return on_step, on_epoch

    def step_values(self, strategy: Strategy, local: bool = False) -> dict[str, torch.Tensor]:
        """Latest on-step values, reduced across ranks where ``sync_dist`` asked for it (``local``: this
        rank's own, no communication)."""
        out = {}
        for key, e in self._entries.items():
            if e.on_step and e.logger and e.last is not None:
                synced = e.sync_dist and not local and self.step_sync is None  # else reduced when logged
                value = strategy.reduce(e.last, e.reduce) if synced else e.last
                out[key + "_step" if e.on_epoch else key] = value
        return out

    def current_values(self) -> dict[str, torch.Tensor]:
        """Latest values for ``callback_metrics`` (no communication)."""
        out = {}
        for key, e in self._entries.items():
            if e.last is None:
                continue
            out[key] = e.last
            if e.on_step and e.on_epoch:
                out[key + "_step"] = e.last
        return out

    def view(self, kind: str) -> dict[str, Any]:
        """What Lightning's result collection shows now to ``callback_metrics`` (``kind`` "callback"),
        ``logged_metrics`` ("log") or ``progress_bar_metrics`` ("pbar", numbers read from the device).

        While `stepping`: the on-step values (training's in the callback metrics too, evaluation's
        not); after the batches: the on-epoch aggregates, as `epoch_values` last computed them
        (this rank's own for a value first logged after that, in an epoch-end hook).
        """
        out: dict[str, Any] = {}
        stepping = self.stepping
        for key, e in self._entries.items():
            forked, value = self._shown_value(key, e, stepping)
            if value is None:
                continue
            if kind == "log":
                if e.logger:
                    out[forked] = value
            elif kind == "pbar":
                if e.prog_bar:
                    out[forked] = value.item()
            elif self.training or not stepping:
                out[key] = value
                out[forked] = value
        return out

    def _shown_value(self, key: str, e: _Entry, stepping: bool) -> tuple[str, torch.Tensor | None]:
        """``(the name the loggers get, the value)`` of one entry in `view` (None: nothing to show now)."""
        if stepping:
            return (key + "_step" if e.on_epoch else key), (e.last if e.on_step else None)
        forked = key + "_epoch" if e.on_step else key
        if not e.on_epoch:
            return forked, None
        value = self.aggregates.get(forked)
        if value is None and e.metric is None and e.total is not None:
            value = _local_aggregate(e)
        return forked, value

    def hidden_from_loggers(self) -> set[str]:
        """Names the loggers do not get (as in Lightning).

        All forms of a value logged with ``logger=False``; the bare name of one logged both
        on_step and on_epoch (the loggers get ``name_step`` and ``name_epoch``; the bare name is
        the callback metric that monitors use).
        """
        hidden: set[str] = set()
        for key, e in self._entries.items():
            if not e.logger:
                hidden.update((key, key + "_step", key + "_epoch"))
            elif e.on_step and e.on_epoch:
                hidden.add(key)
        return hidden

    def progress_bar_keys(self) -> list[str]:
        """Keys the module asked to show on the progress bar."""
        return [k for k, e in self._entries.items() if e.prog_bar]

    def epoch_values(self, strategy: Strategy, sync_all: bool = False) -> dict[str, torch.Tensor]:
        """Epoch aggregates of on-epoch values.

        Values with ``sync_dist`` are reduced exactly across ranks; ``sync_all`` reduces every
        value (evaluation does, so its metrics never depend on which shard a rank saw) and
        first agrees on the set of names, since a rank with an empty shard logged nothing.
        """
        entries = {k: e for k, e in self._entries.items() if e.on_epoch and (e.total is not None or e.metric is not None)}
        if sync_all:
            entries = self._agree_on_entries(entries, strategy)
        out = {}
        for key, e in entries.items():
            value = _finish(key, e, strategy, sync_all or e.sync_dist)
            out[key + "_epoch" if e.on_step else key] = value
            if e.on_step:
                out[key] = value
        self.aggregates = out
        return out

    def _agree_on_entries(self, entries: dict[str, _Entry], strategy: Strategy) -> dict[str, _Entry]:
        mine = sorted((k, e.reduce, e.on_step) for k, e in entries.items())
        union = sorted({item for rank_items in strategy.all_gather_object(mine) for item in rank_items})
        agreed = {}
        for key, reduce, on_step in union:
            if key in entries:
                agreed[key] = entries[key]
            else:  # this rank saw no batch that logged `key`: contribute the reduction's identity
                identity = {"max": float("-inf"), "min": float("inf")}.get(reduce, 0.0)
                total = torch.tensor(identity, device=strategy.root_device)
                agreed[key] = _Entry(on_step, True, False, True, reduce, total, total, 0.0)
        return agreed

    def finish_epoch(self, strategy: Strategy, sync_all: bool = False) -> dict[str, torch.Tensor]:
        """`epoch_values`, then reset the logged Metric objects for the next epoch (as Lightning)."""
        values = self.epoch_values(strategy, sync_all=sync_all)
        self._reset_metric_objects()
        return values

    def _reset_metric_objects(self) -> None:
        for e in self._entries.values():
            if e.metric is not None:
                e.metric.reset()

    def reset(self) -> None:
        """Forget everything (a new epoch or evaluation run); reset the logged Metric objects."""
        self._reset_metric_objects()  # an epoch stopped early (max_steps) must not leak its state
        self._entries.clear()
        self.aggregates = {}
        self.stepping = False
        self._batch = None
        self._batch_size_known = False


def _as_scalar_tensor(name: str, value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"self.log({name!r}) needs a scalar, got a tensor of shape {tuple(value.shape)}; "
                "reduce it first (e.g. .mean())."
            )
        scalar: torch.Tensor = value.detach()  # a typed name, not a cast: self.log runs every step
        return scalar if scalar.dim() == 0 else scalar.reshape(())  # a loss is 0-d: no view to make
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(float(value))
    raise TypeError(
        f"self.log({name!r}) needs a number, a scalar tensor or a torchmetrics Metric, got {type(value).__name__}"
    )


def _metric_or_tensor(name: str, value: Any, on_step: bool) -> tuple[Any, torch.Tensor | None]:
    """``(metric, None or its step value)`` for a torchmetrics ``Metric`` (checked only when torchmetrics
    is imported: its epoch value is computed at the end, by itself), else ``(None, the scalar tensor)``."""
    torchmetrics = sys.modules.get("torchmetrics")
    if torchmetrics is not None and isinstance(value, torchmetrics.Metric):
        return value, (_metric_step_value(name, value) if on_step else None)
    return None, _as_scalar_tensor(name, value)


def _new_entry(
    on_step: bool, on_epoch: bool, prog_bar: bool, logger: bool, sync_dist: bool, reduce: Any, metric: Any
) -> _Entry:
    """A name's first value: how it is logged (a Metric syncs itself, so its entry never reduces)."""
    entry = _Entry(on_step, on_epoch, prog_bar, sync_dist and metric is None, reduce, None)
    entry.logger, entry.metric = logger, metric
    return entry


def _metric_step_value(name: str, metric: Any) -> torch.Tensor | None:
    # torchmetrics keeps the last forward's batch value here (Lightning reads it the same way);
    # .update() alone computes none, and .compute() every step would sync ranks every step.
    cache = getattr(metric, "_forward_cache", None)
    if not isinstance(cache, torch.Tensor):
        # Lightning logs nothing for such a step, silently; Lockstep does the same, and says so once
        rank_zero_warn(
            f"self.log({name!r}, <{type(metric).__name__}>, on_step=True): the metric has no value for "
            "this batch (only .update() was called), so no step value is logged, as in Lightning; call "
            "it (metric(preds, target)) for a step value, or log it with on_step=False.",
            stacklevel=user_stacklevel(),
        )
        return None
    return _as_scalar_tensor(name, cache)


def _accumulate(entry: _Entry, value: torch.Tensor, batch_size: int | None) -> None:
    if batch_size is None:  # a batch without tensors counts once
        batch_size = 1
    if entry.reduce == "mean":
        if entry.total is None:
            entry.total = value.float() * batch_size
        else:
            entry.total.add_(value, alpha=batch_size)
        entry.weight += batch_size
    elif entry.reduce == "sum":
        if entry.total is None:
            entry.total = value.float().clone()
        else:
            entry.total.add_(value)
    else:
        pick: Callable[..., torch.Tensor] = torch.maximum if entry.reduce == "max" else torch.minimum
        entry.total = value.float().clone() if entry.total is None else pick(entry.total, value.float())


def _local_aggregate(entry: _Entry) -> torch.Tensor:
    """This rank's aggregate so far, without communication (a view reads it, on one rank only)."""
    assert entry.total is not None
    return entry.total / entry.weight if entry.reduce == "mean" else entry.total


def _finish(key: str, entry: _Entry, strategy: Strategy, sync: bool) -> torch.Tensor:
    if entry.metric is not None:  # syncs over ranks itself (torchmetrics' dist_sync at compute)
        return _as_scalar_tensor(key, entry.metric.compute())
    assert entry.total is not None
    if entry.reduce == "mean":
        if sync:
            both = torch.stack([entry.total, entry.total.new_tensor(entry.weight)])
            both = strategy.reduce(both, "sum")
            return both[0] / both[1]
        return entry.total / entry.weight
    return strategy.reduce(entry.total, entry.reduce) if sync else entry.total
