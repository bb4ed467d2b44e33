"""Gradual learning-rate warmup and the linear scaling of schedulers' learning rates.

Goyal et al. 2017 ("Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour",
arXiv:1706.02677) train with batch ``k * B`` by multiplying the learning rate by ``k`` (the
linear scaling rule) and reaching that rate gradually: the rate grows linearly from a small
value to the target over the first steps, because the large rate is unstable while the weights
are changing quickly at the start of training.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Set

from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import CyclicLR, LRScheduler, OneCycleLR, ReduceLROnPlateau

from trainer.contracts.arguments import check_int, check_number


def _as_float(value: Any) -> float:
    return float(value.item()) if isinstance(value, Tensor) else float(value)


def _set_lr(group: Dict[str, Any], lr: float) -> None:
    # A tensor lr is filled in place: the optimizer (and a compiled step) may hold that tensor.
    if isinstance(group["lr"], Tensor):
        group["lr"].fill_(lr)
    else:
        group["lr"] = lr


def _copy_lr(lr: Any) -> Any:
    # get_last_lr() must not alias a tensor lr that later steps modify in place.
    return lr.clone() if isinstance(lr, Tensor) else lr


class LinearWarmup(LRScheduler):
    r"""Linear warmup (Goyal et al. 2017) over ``warmup_steps`` scheduler steps, then ``after``.

    With :math:`b` the group's base rate (``group["initial_lr"]``, so a rate already set
    there is respected), :math:`W` = ``warmup_steps``, :math:`s` = ``start_factor`` and
    :math:`t` the number of :meth:`step` calls so far:

    .. math::

        \text{lr}_t = b\left(s + (1 - s)\frac{t}{W}\right) \quad (0 \le t < W), \qquad
        \text{lr}_W = b \cdot c

    where :math:`c` = the ``after`` scheduler's first rate divided by :math:`b` (1 for every
    decay schedule, 1 without ``after``). From :math:`t = W` on, ``after`` runs as if it had
    been created at step :math:`W`: step :math:`t` of this scheduler is step :math:`t - W` of
    ``after``. Without ``after`` the rate stays at :math:`b`.

    The warmup is computed from ``base_lrs`` at every step, so multiplying ``group["lr"]``,
    ``group["initial_lr"]`` and the schedulers' base rates by ``k`` (see
    :func:`scale_scheduler_base_lrs`) at any point yields the ``k``-times-larger schedule.
    Resume through :meth:`state_dict` / :meth:`load_state_dict`, which include ``after``'s state.

    Build it with :func:`warmup`; ``after`` must be fresh (not stepped yet) and belong to the
    same optimizer. Use it as the outermost scheduler.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        warmup_steps: int,
        start_factor: float,
        after: Optional[LRScheduler] = None,
    ) -> None:
        self.warmup_steps = check_int("warmup_steps", warmup_steps, 0)
        self.start_factor = check_number("start_factor", start_factor, above=0, maximum=1)
        if after is not None:
            if isinstance(after, ReduceLROnPlateau):
                raise TypeError(
                    "warmup cannot hand over to ReduceLROnPlateau: it steps on a metric, not per step"
                )
            if not isinstance(after, LRScheduler):
                raise TypeError(f"after must be an LRScheduler or None, got {type(after).__name__}")
            if after.optimizer is not optimizer:
                raise ValueError("the wrapped scheduler belongs to a different optimizer")
            if getattr(after, "last_epoch", 0) != 0:
                raise ValueError(
                    "the wrapped scheduler has already been stepped "
                    f"(last_epoch={after.last_epoch}); wrap a freshly created one"
                )
        self.after = after
        # Ratios rather than rates: they survive a later rescaling of initial_lr/base_lrs.
        self.handover_factors = [
            1.0 if after is None else self._handover_factor(g) for g in optimizer.param_groups
        ]
        super().__init__(optimizer)

    @staticmethod
    def _handover_factor(group: Dict[str, Any]) -> float:
        base = _as_float(group.get("initial_lr", group["lr"]))
        return _as_float(group["lr"]) / base if base != 0 else 1.0

    def _closed_form(self, t: int) -> List[float]:
        base_lrs = [_as_float(b) for b in self.base_lrs]
        if t >= self.warmup_steps:
            return [b * c for b, c in zip(base_lrs, self.handover_factors)]
        fraction = self.start_factor + (1.0 - self.start_factor) * t / self.warmup_steps
        return [b * fraction for b in base_lrs]

    def get_lr(self) -> List[float]:  # type: ignore[override]
        """The rates for the current step (``last_epoch``), as :meth:`step` sets them."""
        if self.after is not None and self.last_epoch > self.warmup_steps:
            return [_as_float(g["lr"]) for g in self.optimizer.param_groups]
        return self._closed_form(self.last_epoch)

    def step(self, epoch: Optional[int] = None) -> None:
        """Advance one step: the next warmup rate, the hand-over rate, or one step of ``after``."""
        if epoch is not None:
            raise TypeError("LinearWarmup.step() takes no epoch argument; call step() once per step")
        self._step_count += 1
        self.last_epoch += 1
        if self.after is not None and self.last_epoch > self.warmup_steps:
            self.after.step()
        else:
            for group, lr in zip(self.optimizer.param_groups, self._closed_form(self.last_epoch)):
                _set_lr(group, lr)
        self._last_lr = [_copy_lr(group["lr"]) for group in self.optimizer.param_groups]

    def state_dict(self) -> Dict[str, Any]:
        """Own state plus ``after``'s, under the key ``"after"``."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "after")}
        state["after"] = None if self.after is None else self.after.state_dict()
        return state

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`, including the wrapped scheduler's."""
        state = dict(state_dict)
        after_state = state.pop("after", None)
        if (after_state is None) != (self.after is None):
            raise ValueError(
                "state_dict and scheduler disagree on whether warmup wraps another scheduler"
            )
        self.__dict__.update(state)
        if self.after is not None:
            self.after.load_state_dict(after_state)


def warmup(
    scheduler: Optional[LRScheduler],
    warmup_steps: int,
    start_factor: float,
    *,
    optimizer: Optional[Optimizer] = None,
) -> LinearWarmup:
    """Gradual warmup (Goyal et al. 2017) in front of ``scheduler``, or a constant rate after it.

    The rate rises linearly from ``initial_lr * start_factor`` at step 0 to ``initial_lr`` at
    step ``warmup_steps``; then ``scheduler`` (cosine, step, polynomial, ... decay) takes over,
    counting its own steps from the end of the warmup. With ``scheduler=None`` the rate stays at
    ``initial_lr`` and ``optimizer`` must be given. Step the result once per optimizer step::

        sched = warmup(CosineAnnealingLR(opt, T_max=total - 500), 500, 0.1)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    Raises ``ValueError`` for ``warmup_steps < 0`` or ``start_factor`` outside (0, 1].
    """
    if scheduler is None:
        if optimizer is None:
            raise ValueError(
                "warmup(None, ...) needs the optimizer: warmup(None, steps, factor, optimizer=opt)"
            )
        return LinearWarmup(optimizer, warmup_steps, start_factor)
    if optimizer is not None and optimizer is not scheduler.optimizer:
        raise ValueError("optimizer is not the optimizer of the given scheduler")
    return LinearWarmup(scheduler.optimizer, warmup_steps, start_factor, after=scheduler)


def scale_scheduler_base_lrs(scheduler: Any, factor: float) -> None:
    """Multiply every learning rate a scheduler remembers by ``factor`` (linear scaling rule).

    Afterwards the schedule produces ``factor`` times the rates it would have produced, floors
    included. Scaled: ``base_lrs`` and the last reported rates; ``eta_min`` (cosine schedules);
    ``min_lrs`` (``ReduceLROnPlateau``); ``CyclicLR``'s ``max_lrs``; ``OneCycleLR``'s
    ``max_lr``/``min_lr`` group entries; recursively the schedulers inside ``SequentialLR``,
    ``ChainedScheduler`` and :class:`LinearWarmup`, each object once even if reached twice.
    It does *not* touch ``group["lr"]`` or ``group["initial_lr"]``: the caller multiplies those
    once per optimizer, then calls this once per scheduler.
    """
    factor = check_number("factor", factor, above=0)
    _scale(scheduler, factor, set())


def _scale(scheduler: Any, factor: float, seen: Set[int]) -> None:
    if id(scheduler) in seen:
        return
    seen.add(id(scheduler))
    _scale_rates(scheduler, factor)
    for inner in getattr(scheduler, "_schedulers", ()):
        _scale(inner, factor, seen)
    if isinstance(scheduler, LinearWarmup) and scheduler.after is not None:
        _scale(scheduler.after, factor, seen)


def _scale_rates(scheduler: Any, factor: float) -> None:
    """Scale the rates ``scheduler`` itself holds (not those of the schedulers inside it)."""
    # New lists, not in-place: two schedulers may share one list object.
    if hasattr(scheduler, "base_lrs"):
        scheduler.base_lrs = [b * factor for b in scheduler.base_lrs]
    if hasattr(scheduler, "_last_lr"):
        scheduler._last_lr = [lr * factor for lr in scheduler._last_lr]
    if hasattr(scheduler, "eta_min"):
        scheduler.eta_min = scheduler.eta_min * factor
    _scale_floors_and_peaks(scheduler, factor)


def _scale_floors_and_peaks(scheduler: Any, factor: float) -> None:
    """The rates only some scheduler classes hold: plateau floors, cyclic and one-cycle peaks."""
    if isinstance(scheduler, ReduceLROnPlateau):
        scheduler.min_lrs = [m * factor for m in scheduler.min_lrs]
        default_min_lr = getattr(scheduler, "default_min_lr", None)
        if isinstance(default_min_lr, (int, float)):
            scheduler.default_min_lr = default_min_lr * factor
    if isinstance(scheduler, CyclicLR):
        scheduler.max_lrs = [m * factor for m in scheduler.max_lrs]
    if isinstance(scheduler, OneCycleLR):
        for group in scheduler.optimizer.param_groups:
            group["max_lr"] = group["max_lr"] * factor
            group["min_lr"] = group["min_lr"] * factor
