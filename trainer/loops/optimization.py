"""What `configure_optimizers` returns, the per-window optimizer work (clip, step, schedule), and
`Optimization`: what the fit loop calls, implemented by the automatic and the manual path."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import torch
from torch.optim import Optimizer

from trainer.contracts.schedulers import LRSchedulerConfig, SchedulerMetrics
from trainer.distributed.rank_zero import rank_zero_warn
from trainer.hooks import takes_batch_idx
from trainer.loops.anomaly import check_finite_gradients
from trainer.contracts.user_line import user_stacklevel

if TYPE_CHECKING:
    from trainer.contracts.internals import FitLoopView as FitLoop

_INTERVALS = ("step", "epoch")


_FORMATS = (
    "configure_optimizers() must return an optimizer, a list of optimizers, a tuple "
    "(optimizers, schedulers), or a dict {'optimizer': opt, 'lr_scheduler': sched | "
    "{'scheduler': sched, 'interval': 'step'|'epoch', 'frequency': n}}"
)


def parse_optimizers(result: Any) -> tuple[list[Optimizer], list[LRSchedulerConfig]]:
    """Normalise ``configure_optimizers()``'s return value; raise a clear error otherwise."""
    if isinstance(result, Optimizer):
        return [result], []
    if isinstance(result, Mapping):
        return _parse_dict(result)
    if isinstance(result, (list, tuple)):
        optimizers, configs = _parse_sequence(result)
        _check_optimizers(optimizers)
        return optimizers, configs
    raise TypeError(f"{_FORMATS}; got {type(result).__name__}.")


def _parse_sequence(result: Sequence[Any]) -> tuple[list[Any], list[LRSchedulerConfig]]:
    """``(optimizers, schedulers)``, a list of optimizer dicts, or a list of optimizers."""
    if len(result) == 2 and isinstance(result[0], (list, tuple)) and isinstance(result[1], (list, tuple)):
        return list(result[0]), [_scheduler_config(s) for s in result[1]]
    if all(isinstance(o, Mapping) for o in result) and result:
        parsed = [_parse_dict(d) for d in result]
        return [o for opts, _ in parsed for o in opts], [c for _, cfgs in parsed for c in cfgs]
    return list(result), []


def _parse_dict(d: Mapping[str, Any]) -> tuple[list[Optimizer], list[LRSchedulerConfig]]:
    unknown = set(d) - {"optimizer", "lr_scheduler", "monitor"}
    if "optimizer" not in d or unknown:
        raise ValueError(f"{_FORMATS}; the dict had keys {sorted(d)}.")
    _check_optimizers([d["optimizer"]])
    configs = []
    if d.get("lr_scheduler") is not None:
        configs.append(_scheduler_config(d["lr_scheduler"], default_monitor=d.get("monitor")))
    return [d["optimizer"]], configs


def _check_optimizers(optimizers: Sequence[Any]) -> None:
    if not optimizers:
        raise ValueError(f"{_FORMATS}; it returned no optimizer.")
    for opt in optimizers:
        if not isinstance(opt, Optimizer):
            raise TypeError(f"{_FORMATS}; got an element of type {type(opt).__name__}.")


def _scheduler_config(entry: Any, default_monitor: str | None = None) -> LRSchedulerConfig:
    if isinstance(entry, Mapping):
        if "scheduler" not in entry:
            raise ValueError(f"An lr_scheduler dict needs a 'scheduler' key; got keys {sorted(entry)}.")
        unknown = set(entry) - {f.name for f in dataclasses.fields(LRSchedulerConfig) if f.init}
        if unknown:
            raise ValueError(f"Unknown lr_scheduler keys {sorted(unknown)}.")
        cfg = LRSchedulerConfig(**entry)
    else:
        cfg = LRSchedulerConfig(scheduler=entry)
    if cfg.monitor is None:
        cfg.monitor = default_monitor
    _check_scheduler_config(cfg)
    return cfg


def _check_scheduler_config(cfg: LRSchedulerConfig) -> None:
    if cfg.interval not in _INTERVALS:
        raise ValueError(f"lr_scheduler 'interval' must be 'step' or 'epoch', got {cfg.interval!r}.")
    if isinstance(cfg.frequency, bool) or not isinstance(cfg.frequency, int):
        raise TypeError(f"lr_scheduler 'frequency' must be an int >= 1, got {cfg.frequency!r}.")
    if cfg.frequency < 1:
        raise ValueError(f"lr_scheduler 'frequency' must be an int >= 1, got {cfg.frequency!r}.")
    for key in ("monitor", "name"):
        if getattr(cfg, key) is not None and not isinstance(getattr(cfg, key), str):
            raise TypeError(f"lr_scheduler {key!r} must be None or a str, got {getattr(cfg, key)!r}.")
    if not isinstance(cfg.strict, bool):
        raise TypeError(f"lr_scheduler 'strict' must be a bool, got {cfg.strict!r}.")
    if not hasattr(cfg.scheduler, "step"):
        raise TypeError(f"lr_scheduler {type(cfg.scheduler).__name__} has no step() method.")
    if cfg.is_plateau and cfg.monitor is None:
        raise ValueError(
            "ReduceLROnPlateau needs a metric: return {'optimizer': opt, 'lr_scheduler': "
            "{'scheduler': sched, 'monitor': 'val_loss'}}."
        )


def lr_scale_factor(scale_lr: bool | str, world_size: int) -> float:
    """The LR multiplier for ``scale_lr``: W (linear, Goyal et al. 2017), sqrt(W), or 1; the fit
    loop passes G / b as ``world_size`` under ``global_batch_size``."""
    if scale_lr is not None and not isinstance(scale_lr, (bool, str)):
        raise TypeError(f"scale_lr must be False, True, 'linear' or 'sqrt'; got {scale_lr!r}.")
    if scale_lr is False or scale_lr is None:
        return 1.0
    if scale_lr is True or scale_lr == "linear":
        return float(world_size)
    if scale_lr == "sqrt":
        return math.sqrt(world_size)
    raise ValueError(f"scale_lr must be False, True, 'linear' or 'sqrt'; got {scale_lr!r}.")


def scale_learning_rates(
    optimizers: Iterable[Optimizer], configs: Iterable[LRSchedulerConfig], factor: float
) -> None:
    """Multiply ``lr``, ``initial_lr`` and every scheduler's ``base_lrs`` by ``factor``, once."""
    if factor == 1.0:
        return
    for opt in optimizers:
        for group in opt.param_groups:
            group["lr"] *= factor
            if "initial_lr" in group:
                group["initial_lr"] *= factor
    from trainer.optim.warmup import scale_scheduler_base_lrs

    for cfg in configs:
        scale_scheduler_base_lrs(cfg.scheduler, factor)


def optimizer_parameters(optimizer: Optimizer) -> list[torch.Tensor]:
    """Every parameter an optimizer updates (computed once per fit, not per step)."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def clip_gradients(params: list[torch.Tensor], value: float, algorithm: str) -> None:
    """Clip gradients in place by global norm or by value."""
    if algorithm == "norm":
        torch.nn.utils.clip_grad_norm_(params, value)
    else:
        torch.nn.utils.clip_grad_value_(params, value)


def step_schedulers(
    configs: Iterable[LRSchedulerConfig],
    interval: str,
    count: int,
    metrics: Callable[[], SchedulerMetrics],
    step: Callable[[Any, Any], None] | None = None,
    plateau: bool | None = None,
) -> None:
    """Step every scheduler with ``interval`` whose ``frequency`` divides ``count`` (``plateau``:
    only the ``ReduceLROnPlateau`` ones, or only the others; Lightning steps the others before
    validation and the plateau ones after it, when their monitor may have a new value).

    ``metrics`` is called only when a ``ReduceLROnPlateau`` needs its monitored value. Such a
    scheduler steps only when its monitor holds a value logged since its last step: with
    ``check_val_every_n_epoch=2`` a validation metric is new every second epoch, and stepping on
    the old value in between would count the same result twice towards ``patience``. ``step`` is
    the module's ``lr_scheduler_step(scheduler, metric)`` when it overrides it (``metric`` is the
    monitored value, ``None`` for other schedulers), as in Lightning.
    """
    for cfg in configs:
        if cfg.interval != interval or count % cfg.frequency or plateau not in (None, cfg.is_plateau):
            continue
        scheduler = cfg.scheduler
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):  # `cfg.is_plateau`, narrowed for the type checker
            value = _new_monitored_value(cfg, metrics())
            if value is None:
                continue
            if step is not None:
                step(scheduler, value)
            else:
                scheduler.step(float(value))
        elif step is not None:
            step(scheduler, None)
        else:
            scheduler.step()


def _new_monitored_value(cfg: LRSchedulerConfig, metrics: SchedulerMetrics) -> Any:
    """The monitor's value if it was logged since the scheduler's last step, else None."""
    if cfg.monitor is not None and cfg.monitor in metrics.values:
        value = metrics.values[cfg.monitor]
        if value is cfg.last_monitored:
            return None
        cfg.last_monitored = value
        return value
    if metrics.validation_pending:  # it may be a validation metric: validation has not run yet
        return None
    message = (
        f"ReduceLROnPlateau monitors {cfg.monitor!r}, which was not logged (validation has run, or "
        f"there is none). Logged metrics: {sorted(metrics.values)}."
    )
    if cfg.strict:
        raise ValueError(
            f"{message} Log it with self.log({cfg.monitor!r}, ...), fix the scheduler's 'monitor', or "
            "set 'strict': False in the scheduler dict to skip the step instead."
        )
    rank_zero_warn(f"{message} The scheduler does not step ('strict': False).", stacklevel=user_stacklevel())
    return None


def returned_loss(output: Any) -> Any:
    """The loss in ``training_step``'s return value: the value itself, or a mapping's ``"loss"``."""
    return output.get("loss") if isinstance(output, Mapping) else output


class LoopOptimizer:
    """An optimizer as the loop hands it to the module; ``step`` goes through the optimization path.

    ``step(closure=None, **kwargs)`` runs the path's `Optimization.optimizer_step`; every other
    attribute (``param_groups``, ``zero_grad``, ``state_dict``, ...) is the wrapped optimizer's.
    """

    def __init__(self, optimizer: Optimizer, optimization: Optimization) -> None:
        self.optimizer = optimizer
        self._optimization = optimization

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """One optimizer step through the loop (see the class docstring)."""
        return self._optimization.optimizer_step(self.optimizer, closure, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.optimizer!r})"


class Optimization:
    """What the fit loop calls to train a batch, whichever path steps the optimizers.

    `AutomaticOptimization` (the loop steps them) and `ManualOptimization` (the module does)
    implement it; the fit loop never asks which one runs (``start_epoch``, ``run``,
    ``step_schedulers``). What both do the same way is here: the ``training_step`` call, the
    optimizer step through the precision plugin, clipping, the gradient check and the step metrics.
    """

    #: the module steps its optimizers itself (``automatic_optimization = False``)
    manual: ClassVar[bool] = False

    def __init__(self, loop: FitLoop, grad_check_params: list[tuple[str, torch.Tensor]] | None) -> None:
        t = loop.trainer
        self.loop, self.trainer = loop, t
        # fixed for the fit: read once, not per step (each is a property of the Trainer)
        self._module, self._strategy, self._precision = t.module, t.strategy, t.precision_plugin
        self._grad_check_params = grad_check_params
        self._takes_batch_idx = takes_batch_idx(self._module.training_step)

    # -- what the fit loop calls ---------------------------------------------------------------
    def start_epoch(self, windows: Any) -> None:
        """An epoch begins with these accumulation windows (`AccumulationWindows`)."""
        raise NotImplementedError

    def run(self, batch: Any, batch_idx: int, window_end: bool) -> Any:
        """Train one micro batch (stepping at a window's end); returns ``training_step``'s output."""
        raise NotImplementedError

    def step_schedulers(self, interval: str, count: int, plateau: bool) -> None:
        """Step the schedulers of ``interval`` due at ``count``, the ``ReduceLROnPlateau`` ones or the
        others. Under manual optimization the module steps its own: nothing here."""

    @property
    def module_optimizers(self) -> list[Any]:
        """What ``self.optimizers()`` returns the module, in ``configure_optimizers`` order."""
        raise NotImplementedError

    # -- what the module calls ---------------------------------------------------------------
    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any] | None, kwargs: dict[str, Any]) -> Any:
        """`LoopOptimizer.step`: the closure, the gradient work (`_gradients_ready`), the precision step."""
        precision = self._precision
        if closure is not None and precision.scaler is None:

            def wrapped() -> Any:  # the optimizer may call it several times (LBFGS): the work follows each
                with torch.enable_grad():  # an optimizer's step runs under no_grad
                    result = closure()
                self._gradients_ready(optimizer)
                return result

            output = optimizer.step(closure=wrapped, **kwargs)
        else:
            result = closure() if closure is not None else None
            self._gradients_ready(optimizer)
            output = self._precision_step(optimizer, result, kwargs)
        precision.update()
        self._stepped()
        return output

    def clip(self, optimizer: Any, value: float | None, algorithm: str | None) -> None:
        """``self.clip_gradients``: unscale (fp16), then clip ``optimizer``'s gradients (``0``/``None``: not)."""
        value, algorithm = self._clip_setting(value, algorithm)
        if not value:
            return
        check_clip_algorithm(algorithm)
        optimizer = getattr(optimizer, "optimizer", optimizer)  # the torch optimizer behind a wrapper
        self._precision.unscale(optimizer)
        clip_gradients(optimizer_parameters(optimizer), float(value), algorithm)

    # -- what the paths fill in and share -------------------------------------------------------
    def _clip_setting(self, value: float | None, algorithm: str | None) -> tuple[float | None, str]:
        return value, algorithm or "norm"

    def _gradients_ready(self, optimizer: Optimizer) -> None:
        """After the closure, before ``optimizer``'s step."""
        raise NotImplementedError

    def _precision_step(self, optimizer: Optimizer, closure_result: Any, kwargs: dict[str, Any]) -> Any:
        """The step without a closure for the optimizer to run (one ran already, or there is none)."""
        raise NotImplementedError

    def _stepped(self) -> None:
        """After ``optimizer_step``."""

    def _training_step(self, step: Callable[..., Any], batch: Any, batch_idx: int) -> Any:
        """The strategy's ``step`` of the module's ``training_step``, under the precision's autocast."""
        with self._precision.autocast():
            args = (batch, batch_idx) if self._takes_batch_idx else (batch,)
            return step(self._module, *args)

    def _record_loss(self, shown: torch.Tensor, global_step: int, batch_idx: int) -> None:
        """A loss for the non-finite check (at the step count before the batch's step)."""
        self.loop.loss_check.record(shown, self.loop.progress.current_epoch, global_step, batch_idx)

    def _check_gradients(self, batch_idx: int) -> None:
        """The opt-in non-finite gradient check (``detect_non_finite_grads``)."""
        if self._grad_check_params is not None:
            progress = self.loop.progress
            check_finite_gradients(
                self._grad_check_params, progress.current_epoch, progress.global_step, batch_idx,
                self.trainer.global_rank,
            )

    def _publish_step(self, step: int) -> None:
        """Every ``log_every_n_steps``: the deferred loss check, then the step metrics to the loggers at ``step``."""
        self.loop.loss_check.check()
        self.trainer.metric_logger.publish_step(self._strategy, step, self.loop.progress.current_epoch)


def check_clip_algorithm(algorithm: str) -> None:
    if algorithm not in ("norm", "value"):
        raise ValueError(f"gradient_clip_algorithm must be 'norm' or 'value', got {algorithm!r}.")
