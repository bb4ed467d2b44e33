"""Manual optimization: ``automatic_optimization = False`` hands the optimizer steps to the module.

The loop calls ``training_step`` once per batch and nothing else: the module calls
``self.manual_backward(loss)`` (precision scaling, backward, and under a distributed strategy the
gradient sync), then ``opt.step()`` / ``opt.zero_grad()`` on the `ManualOptimizer` wrappers that
``self.optimizers()`` returns. Each ``step()`` unscales (fp16), runs ``on_before_optimizer_step``,
steps through the precision plugin and counts ``global_step``, as Lightning 2.x does.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch.optim import Optimizer

from trainer.hooks import takes_batch_idx
from trainer.loops.anomaly import check_finite_gradients
from trainer.loops.optimization import clip_gradients, optimizer_parameters

if TYPE_CHECKING:
    from trainer.contracts.protocols import FitLoopView as FitLoop
    from trainer.module import TrainModule


class ManualOptimizer:
    """An optimizer as ``self.optimizers()`` returns it in manual optimization.

    ``step(closure=None, **kwargs)`` runs the closure (if any), unscales the gradients under
    ``"16-mixed"``, calls ``on_before_optimizer_step``, steps through the precision plugin (the
    grad scaler may skip an overflowed step) and adds one to ``trainer.global_step``. Every other
    attribute (``zero_grad``, ``param_groups``, ``state_dict`` ...) is the wrapped optimizer's.
    """

    def __init__(self, optimizer: Optimizer, manual: ManualOptimization) -> None:
        self.optimizer = optimizer
        self._manual = manual

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """One optimizer step (see the class docstring)."""
        return self._manual.optimizer_step(self.optimizer, closure, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def __repr__(self) -> str:
        return f"ManualOptimizer({self.optimizer!r})"


class ManualOptimization:
    """The fit loop's manual path: one ``training_step`` per batch; the module steps the optimizers."""

    def __init__(self, loop: FitLoop, grad_check_params: list[tuple[str, torch.Tensor]] | None) -> None:
        self.loop = loop
        self.trainer = loop.trainer
        self.optimizers = [ManualOptimizer(opt, self) for opt in self.trainer.optimizers]
        self._grad_check_params = grad_check_params
        self._batches = 0  # batches trained in this fit (the step-logging cadence)
        self._takes_batch_idx = takes_batch_idx(self.trainer.module.training_step)
        check_manual_arguments(self.trainer)

    # -- the loop's part ---------------------------------------------------------------------
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        """Run ``training_step``; record its returned loss (if any) for the non-finite check."""
        t, progress = self.trainer, self.loop.progress
        step = progress.global_step  # the steps before this batch, as in automatic optimization
        with t.precision_plugin.autocast():
            output = t.strategy.manual_training_step(t.module, *((batch, batch_idx) if self._takes_batch_idx else (batch,)))
        loss = _returned_loss(output, batch_idx)
        if loss is not None:
            shown = loss.detach()
            self.loop.loss_check.record(shown, progress.current_epoch, step, batch_idx)
            t.metric_logger.last_loss = shown
        return output

    def batch_done(self) -> None:
        """After each batch: publish step metrics every ``log_every_n_steps`` batches."""
        t = self.trainer
        self._batches += 1
        if self._batches % t.log_every_n_steps == 0:
            self.loop.loss_check.check()
            t.metric_logger.publish_step(t.strategy, self.loop.progress.global_step, self.loop.progress.current_epoch)

    # -- what the module calls ---------------------------------------------------------------
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``manual_backward``: hooks, precision backward, then the gradient sync across ranks."""
        t = self.trainer
        t.hooks.call("on_before_backward", loss)
        t.precision_plugin.backward(loss, *args, **kwargs)
        t.strategy.sync_gradients()
        t.hooks.call("on_after_backward")

    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any] | None, kwargs: dict[str, Any]) -> Any:
        """`ManualOptimizer.step`: closure, unscale, hook, precision step, scaler update, count."""
        t, progress = self.trainer, self.loop.progress
        precision = t.precision_plugin
        if closure is not None and precision.scaler is None:
            # the optimizer may call the closure several times (LBFGS): the hook follows each call
            def wrapped() -> Any:
                result = closure()
                self._before_step(optimizer)
                return result

            output = optimizer.step(closure=wrapped, **kwargs)
        else:
            output = closure() if closure is not None else None
            self._before_step(optimizer)
            precision.optimizer_step(optimizer, **kwargs)
        precision.update()
        self.loop.optimizer_stepped()
        return output

    def clip(self, optimizer: Optimizer, value: float | None, algorithm: str | None) -> None:
        """``self.clip_gradients``: unscale (fp16), then clip ``optimizer``'s gradients."""
        if value is None or value == 0:
            return
        algorithm = algorithm or "norm"
        if algorithm not in ("norm", "value"):
            raise ValueError(f"gradient_clip_algorithm must be 'norm' or 'value', got {algorithm!r}.")
        self.trainer.precision_plugin.unscale(optimizer)
        clip_gradients(optimizer_parameters(optimizer), float(value), algorithm)

    def _before_step(self, optimizer: Optimizer) -> None:
        t, progress = self.trainer, self.loop.progress
        t.precision_plugin.unscale(optimizer)
        if self._grad_check_params is not None:
            check_finite_gradients(
                self._grad_check_params, progress.current_epoch, progress.global_step, progress.batch_idx, t.global_rank
            )
        t.hooks.call("on_before_optimizer_step", optimizer)


def check_manual_arguments(trainer: Any) -> None:
    """Trainer arguments that only mean something when the loop steps the optimizers are errors."""
    if trainer.accumulate_grad_batches != 1:
        raise ValueError(
            f"accumulate_grad_batches={trainer.accumulate_grad_batches} does not apply to manual "
            "optimization (automatic_optimization = False): the module steps its optimizers itself. "
            "Remove it (or a GradientAccumulationScheduler) and accumulate in training_step, using "
            "`with self.no_backward_sync():` for the backward passes that should not sync."
        )
    if trainer.gradient_clip_val:
        raise ValueError(
            f"gradient_clip_val={trainer.gradient_clip_val} does not apply to manual optimization "
            "(automatic_optimization = False). Remove it and call self.clip_gradients(opt, "
            "gradient_clip_val=..., gradient_clip_algorithm=...) before opt.step()."
        )


def _returned_loss(output: Any, batch_idx: int) -> torch.Tensor | None:
    loss = output.get("loss") if isinstance(output, Mapping) else output
    if loss is None or isinstance(loss, torch.Tensor):
        return loss
    raise TypeError(
        "In manual optimization training_step returns None, a tensor, or a dict (its 'loss', if any, "
        f"a tensor); at batch index {batch_idx} it returned {type(output).__name__}"
        + ("" if not isinstance(output, Mapping) else f" whose 'loss' is a {type(loss).__name__}")
        + "."
    )
