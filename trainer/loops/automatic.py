"""Automatic optimization: one micro batch's forward and backward, and the step that ends a window.

Lightning's structure, so that a module's overrides take effect as they do there: each micro batch
runs as a *closure* (``training_step``, then ``backward``); a micro batch that does not end its
window runs its closure directly, inside ``Strategy.no_sync``; the last one of a window hands its
closure to the module's ``optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)``, whose
``optimizer.step(closure=optimizer_closure)`` runs it, then the window's gradient work (the
strategy's sync, the accumulation correction, unscaling), ``on_before_optimizer_step``,
``configure_gradient_clipping`` and the precision plugin's step. After the step: zero the
gradients, count ``global_step``, step the step-interval schedulers (``lr_scheduler_step``) but
a ``ReduceLROnPlateau``, which the fit loop steps after the batch's validation, as Lightning.

Overridden hooks are found once per fit; a module that overrides none of them runs the lean path:
the closure called directly, then a plain step of every optimizer. Gradients are cleared right after
the step (their memory is free during the next forward), unless the module overrides
``optimizer_step`` or ``optimizer_zero_grad``, steps an ``LBFGS``, or a callback or the module
implements ``on_before_zero_grad``: then, as in Lightning, in the first micro batch of each
window, between ``training_step`` and ``backward``.
"""
from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch.optim import Optimizer

from trainer.distributed.rank_zero import rank_zero_warn
from trainer.hooks import module_override
from trainer.loops.accumulation_windows import AccumulationWindows
from trainer.loops.loss_normalization import ItemMeanNormalizer
from trainer.loops.manual import ManualOptimization
from trainer.loops.optimization import (
    LoopOptimizer,
    Optimization,
    check_clip_algorithm,
    clip_gradients,
    optimizer_parameters,
    returned_loss,
    step_schedulers,
)
from trainer.contracts.user_line import user_stacklevel

if TYPE_CHECKING:
    from trainer.contracts.internals import FitLoopView as FitLoop


# "no context" for a strategy without one: stateless and shared, no allocation per step
_NO_CONTEXT = contextlib.nullcontext()


class StepOptimizer(LoopOptimizer):
    """The optimizer an overridden ``optimizer_step`` receives (Lightning's ``LightningOptimizer``).

    ``step(closure=None, **kwargs)`` steps through the loop: the closure (the micro batch's forward
    and backward), the window's gradient work, ``on_before_optimizer_step``, clipping, then the
    precision plugin's step. Every other attribute (``param_groups``, ``zero_grad``, ...) is the
    wrapped optimizer's.
    """


def optimization_for(loop: FitLoop, grad_check_params: list[tuple[str, torch.Tensor]] | None) -> Optimization:
    """The module's path: `AutomaticOptimization`, or `ManualOptimization` under ``automatic_optimization = False``."""
    path = AutomaticOptimization if loop.trainer.module.automatic_optimization else ManualOptimization
    return path(loop, grad_check_params)


class AutomaticOptimization(Optimization):
    """The fit loop's automatic path: a closure per micro batch, one step per window."""

    def __init__(self, loop: FitLoop, grad_check_params: list[tuple[str, torch.Tensor]] | None) -> None:
        super().__init__(loop, grad_check_params)
        t, module = self.trainer, self._module
        self._optimizers = t.optimizers
        self._params = {id(opt): optimizer_parameters(opt) for opt in t.optimizers}
        self._all_params = list(self._params.values())
        self._normalizer = ItemMeanNormalizer()
        self._scheduler_hook = module_override(t, module, "lr_scheduler_step")
        self._optimizer_step = module_override(t, module, "optimizer_step")
        self._zero_grad_hook = module_override(t, module, "optimizer_zero_grad")
        self._clip_hook = module_override(t, module, "configure_gradient_clipping")
        self._backward_hook = module_override(t, module, "backward")
        pairs = (("optimizer_step", self._optimizer_step), ("optimizer_zero_grad", self._zero_grad_hook))
        overridden = [n for n, f in pairs if f]
        if overridden and len(t.optimizers) > 1:
            raise ValueError(
                f"{type(module).__name__} overrides {' and '.join(overridden)}, which Lightning calls with "
                f"the one optimizer of automatic optimization; configure_optimizers returned "
                f"{len(t.optimizers)}. Step several optimizers under manual optimization "
                "(self.automatic_optimization = False), as Lightning requires."
            )
        needs_closure = any(isinstance(opt, torch.optim.LBFGS) for opt in t.optimizers)
        if needs_closure and t.precision == "16-mixed":
            raise ValueError(
                "LBFGS re-evaluates its closure, which the fp16 grad scaler does not allow (as in Lightning)."
            )
        # Lightning's position of zero_grad: the optimizer may call the closure again (LBFGS), an
        # override may depend on when it runs, or a hook watches it (the hooks' order is Lightning's)
        self.zero_in_closure = bool(overridden) or needs_closure or t.hooks.implemented("on_before_zero_grad")
        self.no_sync = self._strategy.no_sync
        self.collectives = self._strategy.collectives  # a backward is one (DDP's, FSDP's gradient sync)
        # one process has no collective to track: its backward syncs nothing
        self._track_collectives = t.world_size > 1
        self._step_with_closure = self._optimizer_step is not None or needs_closure
        self.optimizers = [StepOptimizer(opt, self) for opt in t.optimizers]
        self._windows: AccumulationWindows | None = None
        # the hooks' callables, fetched once per fit: a hook nobody overrides costs nothing per step
        hooks = t.hooks
        self._on_before_backward = hooks.callables("on_before_backward")
        self._on_after_backward = hooks.callables("on_after_backward")
        self._on_before_optimizer_step = hooks.callables("on_before_optimizer_step")
        self._on_before_zero_grad = hooks.callables("on_before_zero_grad")
        self._decide_step_calls()
        self._read_settings()

    def _decide_step_calls(self) -> None:
        """What the step calls only where it does something, decided once per fit: the strategy's
        no_sync context and window hook (DDP, all-reduce), autocast, a wrapper around
        training_step, and more to a backward than `loss.backward()` (hooks, an override, a scaler)."""
        strategy, precision = self._strategy, self._precision
        self._sync_context = strategy.overrides("no_sync")
        self._window_hook = strategy.overrides("after_backward_window")
        self._direct_step = not precision.has_autocast and not strategy.overrides("training_step")
        self._plain_backward = not self._on_before_backward and self._backward_hook is None and precision.scaler is None

    def _read_settings(self) -> None:
        """The Trainer's settings and schedulers the step reads: once per epoch, not per step."""
        t = self.trainer
        self._clip_val, self._clip_algorithm = t.gradient_clip_val, t.gradient_clip_algorithm
        self._log_every = t.log_every_n_steps
        self._scheduler_configs = t.lr_scheduler_configs
        self.has_schedulers = bool(self._scheduler_configs)

    def start_epoch(self, windows: AccumulationWindows) -> None:
        """This epoch's accumulation windows (a scheduler may change ``A`` between epochs) and the
        optimizers' parameters (a fine-tuning callback may have added groups at the epoch's start)."""
        self._windows = windows
        self._params = {id(opt): optimizer_parameters(opt) for opt in self.trainer.optimizers}
        self._all_params = list(self._params.values())
        self._read_settings()

    # -- one micro batch ---------------------------------------------------------------------
    def run(self, batch: Any, batch_idx: int, window_end: bool) -> Any:
        """Train one micro batch; at a window's end step the optimizers. Returns ``training_step``'s output."""
        if not window_end:
            return self.micro_batch(batch, batch_idx, False)[0]
        t = self.trainer
        if not self._step_with_closure:  # the lean path
            output, loss = self.micro_batch(batch, batch_idx, True)
            self._after_closure(self._optimizers, batch_idx)
            precision = self._precision
            if precision.scaler is None:
                for optimizer in self._optimizers:
                    optimizer.step()
            else:
                if loss is not None:  # the scaler can't step without a backward
                    for optimizer in self._optimizers:
                        precision.optimizer_step(optimizer)
                precision.update()
            self._after_step()
            return output
        closure = _Closure(self, batch, batch_idx, window_end)
        if self._optimizer_step is not None:
            self._optimizer_step(t.current_epoch, batch_idx, self.optimizers[0], closure)
            if not closure.ran:
                raise RuntimeError(
                    f"{type(t.module).__name__}.optimizer_step did not run optimizer_closure at batch index "
                    f"{batch_idx}: call optimizer.step(closure=optimizer_closure) (or optimizer_closure()), "
                    "as Lightning requires."
                )
        else:
            self.optimizer_step(self._optimizers[0], closure, {})
        self._after_step()
        return closure.output

    def micro_batch(self, batch: Any, batch_idx: int, sync: bool) -> tuple[Any, torch.Tensor | None]:
        """One micro batch's ``training_step``, zero_grad (Lightning's position) and backward:
        (``training_step``'s output, the loss as backward saw it; None: the step skipped the batch)."""
        with self.no_sync(sync) if self._sync_context else _NO_CONTEXT:
            output, loss = self.forward(batch, batch_idx)
            if self.zero_in_closure:
                self.zero_grad(batch_idx)
            if loss is not None:
                if self._track_collectives:
                    with self.collectives.inside("backward, gradients synced" if sync else "backward, no sync"):
                        self.backward(loss)
                elif self._plain_backward:  # `backward` with nothing to add
                    loss.backward()
                else:
                    self.backward(loss)
        if loss is not None:
            for hook in self._on_after_backward:
                hook()
        return output, loss

    @property
    def module_optimizers(self) -> list[Any]:
        """The optimizers themselves (an overridden ``optimizer_step`` receives them wrapped)."""
        return list(self.trainer.optimizers)

    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any] | None, kwargs: dict[str, Any]) -> Any:
        """`StepOptimizer.step`: the closure, the window's gradient work, the hooks, the precision step."""
        return super().optimizer_step(optimizer, closure if closure is not None else _nothing, kwargs)

    def _gradients_ready(self, optimizer: Optimizer) -> None:
        self._after_closure([optimizer], self.loop.progress.batch_idx)

    def _precision_step(self, optimizer: Optimizer, closure_result: Any, kwargs: dict[str, Any]) -> Any:
        if closure_result is None:  # no backward ran: nothing for the scaler to step on (as in Lightning)
            return None
        return self._precision.optimizer_step(optimizer, **kwargs)

    # -- what the closure runs -----------------------------------------------------------------
    def forward(self, batch: Any, batch_idx: int) -> tuple[Any, torch.Tensor | None]:
        """``training_step`` and its loss, divided for the window (``None``: the step skipped the batch)."""
        t, progress = self.trainer, self.loop.progress
        if self._direct_step:  # no autocast and no wrapper: `_training_step` would only add calls
            module = self._module
            if self._takes_batch_idx:
                output = module.training_step(batch, batch_idx)
            else:  # Lightning's rule: a training_step may take the batch alone
                output = module.training_step(batch)  # type: ignore[call-arg]
        else:
            output = self._training_step(self._strategy.training_step, batch, batch_idx)
        if output is None:
            if t.world_size > 1:
                raise RuntimeError(
                    f"training_step returned None at batch index {batch_idx}: skipping a batch is not supported "
                    "with several processes (the other ranks would wait for its gradients), as in Lightning."
                )
            rank_zero_warn(
                "training_step returned None: the batch is skipped (no backward), as in Lightning.",
                stacklevel=user_stacklevel(),
            )
            return output, None
        if output.__class__ is torch.Tensor and output.requires_grad and output.numel() == 1:
            loss = output  # the usual return value, which `_loss_of` would accept as it is
        else:
            loss = _loss_of(output, batch_idx)
        shown = loss.detach()
        self.loop.loss_check.record(shown, progress.current_epoch, progress.global_step, batch_idx)
        windows = self._windows
        assert windows is not None
        plain = batch_idx < windows.plain_until  # a full window: no padding, divided by A
        padding = not plain and windows.is_padding(batch_idx)
        items = self._normalizer.observe(output, loss, batch_idx, counts=not padding)
        if padding:  # only joins the window's collectives: no gradient, no items
            scaled = loss * 0.0
        elif items is not None:
            scaled = loss  # a sum: normalised by the global item count at the step
            shown = shown / items.clamp_min(1.0)  # shown as this batch's mean
        else:
            divisor = windows.accumulate if plain else windows.loss_divisor(batch_idx)
            scaled = loss / divisor if divisor != 1 else loss
        t.metric_logger.last_loss = shown
        return output, scaled

    def zero_grad(self, batch_idx: int) -> None:
        """Lightning's position: the first micro batch of a window, before its backward."""
        t = self.trainer
        assert self._windows is not None
        if not self._windows.is_window_start(batch_idx):  # the epoch's A, not a value set since
            return
        optimizer = self._optimizers[0]
        for hook in self._on_before_zero_grad:
            hook(optimizer)
        if self._zero_grad_hook is not None:
            self._zero_grad_hook(t.current_epoch, batch_idx, optimizer)
        else:
            optimizer.zero_grad()

    def backward(self, loss: torch.Tensor) -> None:
        """``on_before_backward``, the backward (the module's ``backward`` if overridden), through the scaler."""
        for hook in self._on_before_backward:
            hook(loss)
        if self._backward_hook is None:
            self._precision.backward(loss)
        else:
            scaler = self._precision.scaler
            self._backward_hook(scaler.scale(loss) if scaler is not None else loss)

    # -- the window's end ----------------------------------------------------------------------
    def _after_closure(self, optimizers: list[Optimizer], batch_idx: int) -> None:
        """Gradients complete: synced, corrected, unscaled, checked, hooked and clipped, per optimizer."""
        precision, windows = self._precision, self._windows
        if self._window_hook:
            self._strategy.after_backward_window()
        assert windows is not None
        # a known length divided each loss by its window's true size (grad_correction is 1)
        fixed = windows.num_batches is not None or self._normalizer.active
        correction = 1.0 if fixed else windows.grad_correction(batch_idx)
        self._normalizer.finish_window(self._strategy, self._all_params)
        for optimizer in optimizers:
            params = self._params[id(optimizer)]
            if correction != 1.0:  # summed losses were never divided by the window size
                torch._foreach_mul_([p.grad for p in params if p.grad is not None], correction)
            if precision.scaler is not None:
                precision.unscale(optimizer)
            if self._grad_check_params is not None:
                self._check_gradients(batch_idx)
            for hook in self._on_before_optimizer_step:
                hook(optimizer)
            if self._clip_hook is not None:
                self._clip_hook(optimizer, self._clip_val, self._clip_algorithm)
            elif self._clip_val:  # None or 0: no clipping (as in Lightning)
                clip_gradients(params, self._clip_val, self._clip_algorithm)

    def _after_step(self) -> None:
        if not self.zero_in_closure:
            for optimizer in self._optimizers:
                for hook in self._on_before_zero_grad:
                    hook(optimizer)
                optimizer.zero_grad(set_to_none=True)
        self.loop.optimizer_stepped()
        progress = self.loop.progress  # the position after the step
        if self._scheduler_configs:  # a ReduceLROnPlateau steps after the batch's validation (fit loop)
            self.step_schedulers("step", progress.global_step, plateau=False)
        if progress.global_step % self._log_every == 0:
            # Lightning's step: the steps taken before this batch's (`FitLoop.logged_steps`)
            self._publish_step(progress.global_step - 1)

    def step_schedulers(self, interval: str, count: int, plateau: bool) -> None:
        """Step the schedulers of ``interval`` due at ``count``, the ``ReduceLROnPlateau`` ones or the
        others (the module's ``lr_scheduler_step`` if overridden)."""
        configs = self._scheduler_configs
        if configs:
            step_schedulers(configs, interval, count, self.loop.scheduler_metrics, self._scheduler_hook, plateau)

    def _clip_setting(self, value: float | None, algorithm: str | None) -> tuple[float | None, str]:
        """As Lightning: ``None`` takes the Trainer's setting; a different value than the Trainer's is an error."""
        t = self.trainer
        if value is None:
            value = t.gradient_clip_val or 0.0
        elif t.gradient_clip_val is not None and t.gradient_clip_val != value:
            raise ValueError(
                f"Trainer(gradient_clip_val={t.gradient_clip_val!r}) and clip_gradients(gradient_clip_val="
                f"{value!r}) disagree: use only one of them."
            )
        algorithm = (algorithm or t.gradient_clip_algorithm or "norm").lower()
        check_clip_algorithm(algorithm)
        return value, algorithm


class _Closure:
    """One micro batch's ``training_step``, zero_grad (Lightning's position) and backward; returns the loss."""

    def __init__(self, automatic: AutomaticOptimization, batch: Any, batch_idx: int, sync: bool) -> None:
        self._automatic = automatic
        self._batch = batch
        self._batch_idx = batch_idx
        self._sync = sync
        self.output: Any = None
        self.ran = False

    def __call__(self) -> torch.Tensor | None:
        loss = self.run()
        return loss.detach() if loss is not None else None  # what an optimizer (LBFGS) reads

    def run(self) -> torch.Tensor | None:
        """The closure's work; returns the loss as backward saw it (None: the step skipped the batch)."""
        self.output, loss = self._automatic.micro_batch(self._batch, self._batch_idx, self._sync)
        self.ran = True
        return loss


def _nothing() -> None:
    return None


def _loss_of(output: Any, batch_idx: int) -> torch.Tensor:
    """The loss inside ``training_step``'s return value, checked for shape and autograd."""
    loss = returned_loss(output)
    if not isinstance(loss, torch.Tensor):
        raise TypeError(
            f"training_step must return a loss tensor or a dict with key 'loss'; at batch index "
            f"{batch_idx} it returned {_describe(output)}."
        )
    if loss.numel() != 1:
        raise ValueError(
            f"training_step must return a scalar loss; at batch index {batch_idx} it has shape "
            f"{tuple(loss.shape)}. Reduce it (e.g. loss.mean()) before returning."
        )
    if not loss.requires_grad:
        raise ValueError(
            f"The loss returned by training_step at batch index {batch_idx} does not require grad: "
            "it is detached from the model's parameters (was it computed under torch.no_grad(), "
            "or with .item()/.detach()?)."
        )
    return loss


def _describe(output: Any) -> str:
    if isinstance(output, Mapping) and "loss" in output:
        return f"a dict whose 'loss' is a {type(output['loss']).__name__}, not a tensor"
    if isinstance(output, Mapping):
        return f"a dict without 'loss' (keys {sorted(map(str, output))})"
    return f"an object of type {type(output).__name__}"
