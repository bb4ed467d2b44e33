"""Manual optimization: ``automatic_optimization = False`` hands the optimizer steps to the module.

The loop calls ``training_step`` once per batch and nothing else: the module calls
``self.manual_backward(loss)`` (precision scaling, backward, and under a distributed strategy the
gradient sync), then ``opt.step()`` / ``opt.zero_grad()`` on the `ManualOptimizer` wrappers that
``self.optimizers()`` returns. Each ``step()`` unscales (fp16), runs ``on_before_optimizer_step``,
steps through the precision plugin and counts ``global_step``, as Lightning 2.x does.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.optim import Optimizer

from trainer.loops.optimization import LoopOptimizer, Optimization, returned_loss

if TYPE_CHECKING:
    from trainer.contracts.internals import FitLoopView as FitLoop


class ManualOptimizer(LoopOptimizer):
    """An optimizer as ``self.optimizers()`` returns it in manual optimization.

    ``step(closure=None, **kwargs)`` runs the closure (if any), unscales the gradients under
    ``"16-mixed"``, calls ``on_before_optimizer_step``, steps through the precision plugin (the
    grad scaler may skip an overflowed step) and adds one to ``trainer.global_step``. Every other
    attribute (``zero_grad``, ``param_groups``, ``state_dict`` ...) is the wrapped optimizer's.
    """


class ManualOptimization(Optimization):
    """The fit loop's manual path: one ``training_step`` per batch; the module steps the optimizers."""

    manual = True

    def __init__(self, loop: FitLoop, grad_check_params: list[tuple[str, torch.Tensor]] | None) -> None:
        super().__init__(loop, grad_check_params)
        self.optimizers = [ManualOptimizer(opt, self) for opt in self.trainer.optimizers]
        check_manual_arguments(self.trainer)

    # -- the loop's part ---------------------------------------------------------------------
    def start_epoch(self, windows: Any) -> None:
        """A `GradientAccumulationScheduler` may have set ``accumulate_grad_batches``: refused here."""
        check_manual_arguments(self.trainer)

    def run(self, batch: Any, batch_idx: int, window_end: bool) -> Any:
        """Run ``training_step`` (every batch ends its window: A is 1); publish the step metrics when due."""
        output = self.training_step(batch, batch_idx)
        # Lightning counts every manual batch as a step of the loggers' scale, over the whole run
        # (a resume included): the batches before this one are its step (`FitLoop.logged_steps`)
        before = self.loop.progress.batches_total
        if (before + 1) % self.trainer.log_every_n_steps == 0:
            self._publish_step(before)
        return output

    @property
    def module_optimizers(self) -> list[Any]:
        """The `ManualOptimizer` wrappers."""
        return list(self.optimizers)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        """Run ``training_step``; record its returned loss (if any) for the non-finite check."""
        step = self.loop.progress.global_step  # the steps before this batch, as in automatic optimization
        output = self._training_step(self._strategy.manual_training_step, batch, batch_idx)
        loss = _returned_loss(output, batch_idx)
        if loss is not None:
            shown = loss.detach()
            self._record_loss(shown, step, batch_idx)
            self.trainer.metric_logger.last_loss = shown
        return output

    # -- what the module calls ---------------------------------------------------------------
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``manual_backward``: hooks, precision backward, then the gradient sync across ranks."""
        t = self.trainer
        t.hooks.call("on_before_backward", loss)
        with self._strategy.collectives.inside("manual_backward"):
            self._precision.backward(loss, *args, **kwargs)
        self._strategy.sync_gradients()
        t.hooks.call("on_after_backward")

    def _gradients_ready(self, optimizer: Optimizer) -> None:
        self._precision.unscale(optimizer)
        self._check_gradients(self.loop.progress.batch_idx)
        self.trainer.hooks.call("on_before_optimizer_step", optimizer)

    def _precision_step(self, optimizer: Optimizer, closure_result: Any, kwargs: dict[str, Any]) -> Any:
        self._precision.optimizer_step(optimizer, **kwargs)
        return closure_result

    def _stepped(self) -> None:
        self.loop.optimizer_stepped()


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
    loss = returned_loss(output)
    if loss is None or isinstance(loss, torch.Tensor):
        return loss
    raise TypeError(
        "In manual optimization training_step returns None, a tensor, or a dict (its 'loss', if any, "
        f"a tensor); at batch index {batch_idx} it returned {type(output).__name__}"
        + ("" if not isinstance(output, Mapping) else f" whose 'loss' is a {type(loss).__name__}")
        + "."
    )
