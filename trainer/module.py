"""`TrainModule`: the user's model, its steps, its optimizers and its hooks."""
from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, TypeVar

import torch
from torch import nn

from trainer.checkpointing.from_checkpoint import check_weights_only, load_module
from trainer.contracts.protocols import ProgressBarView
from trainer.data.data_hooks import DataHooks
from trainer.hyperparameters import HyperparametersMixin

if TYPE_CHECKING:
    from trainer.contracts.internals import TrainerInternals as Trainer


_M = TypeVar("_M", bound="TrainModule")


class TrainModule(DataHooks, HyperparametersMixin, nn.Module):
    """Subclass this: define ``training_step`` and ``configure_optimizers``, optionally the rest.

    ``training_step(batch, batch_idx)`` returns the loss (a scalar tensor) or a dict with key
    ``"loss"``. ``configure_optimizers()`` returns an optimizer, a list of optimizers,
    ``(optimizers, schedulers)``, or ``{"optimizer": opt, "lr_scheduler": sched | {"scheduler":
    sched, "interval": "step"|"epoch", "frequency": n}}``.
    """

    # Class attributes, not instance ones: a subclass that forgets super().__init__() still
    # gets a clear error from nn.Module rather than an AttributeError from us.
    _trainer: Trainer | None = None
    #: ``False``: the module steps its optimizers itself in ``training_step`` (docs/train-module.md)
    automatic_optimization: bool = True
    #: an input for the model summary's output shapes, ``to_torchscript(method="trace")`` and ``to_onnx``
    example_input_array: Any = None
    #: Lightning's names of the checkpoint's hyperparameter keys (libraries edit them in ``on_save_checkpoint``)
    CHECKPOINT_HYPER_PARAMS_KEY = "hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME = "hparams_name"
    CHECKPOINT_HYPER_PARAMS_TYPE = "hparams_type"

    # -- required ---------------------------------------------------------------------------
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | Mapping[str, Any]:
        """Compute and return the loss of one micro batch."""
        raise NotImplementedError

    def configure_optimizers(self) -> Any:
        """Return the optimizer(s) and optional scheduler(s)."""
        raise NotImplementedError

    def configure_model(self) -> None:
        """Build large layers here rather than in ``__init__`` (Lightning's hook).

        Called once per module object by the first ``fit`` / ``validate`` / ``test`` /
        ``predict`` that runs it, before the strategy wraps it: layers created here go straight
        to the device, and under ``strategy="fsdp"`` onto the meta device, so the full model
        never exists on one rank (docs/fsdp.md). Layers must be initialized by their
        ``reset_parameters()`` (torch's are).
        """

    # -- optional steps ---------------------------------------------------------------------
    def validation_step(self, batch: Any, batch_idx: int, *args: Any) -> Any:
        """Evaluate one validation batch; log metrics with ``self.log``."""
        raise NotImplementedError

    def test_step(self, batch: Any, batch_idx: int, *args: Any) -> Any:
        """Evaluate one test batch; log metrics with ``self.log``."""
        raise NotImplementedError

    def predict_step(self, batch: Any, batch_idx: int, *args: Any) -> Any:
        """Return the prediction for one batch (default: ``self(batch)``)."""
        return self(batch)

    # -- data (the loader hooks come from DataHooks) ------------------------------------------
    def prepare_data(self) -> None:
        """Download or write data once per node (local rank 0); other ranks wait."""

    def setup(self, stage: str) -> None:
        """Build what every rank needs (``stage`` is fit/validate/test/predict)."""

    def teardown(self, stage: str) -> None:
        """Release what ``setup`` built; called also after an exception."""

    # -- hooks (order: docs/callbacks.md) ---------------------------------------------------
    def on_fit_start(self) -> None:
        """Fit begins (after set-up, before the sanity check)."""

    def on_fit_end(self) -> None:
        """Fit ended normally."""

    def on_train_start(self) -> None:
        """Before the first training epoch."""

    def on_train_end(self) -> None:
        """After the last training epoch."""

    def on_train_epoch_start(self) -> None:
        """A training epoch begins."""

    def on_train_epoch_end(self) -> None:
        """A training epoch ended (after its validation)."""

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Before a training micro batch."""

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """After a training micro batch (and after the step that ends its window)."""

    def on_validation_start(self) -> None:
        """A validation run begins."""

    def on_validation_end(self) -> None:
        """A validation run ended."""

    def on_validation_epoch_start(self) -> None:
        """Before the first validation batch."""

    def on_validation_epoch_end(self) -> None:
        """After the last validation batch."""

    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before a validation batch."""

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """After a validation batch."""

    def on_test_start(self) -> None:
        """Testing begins."""

    def on_test_end(self) -> None:
        """Testing ended."""

    def on_test_epoch_start(self) -> None:
        """Before the first test batch."""

    def on_test_epoch_end(self) -> None:
        """After the last test batch."""

    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before a test batch."""

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """After a test batch."""

    def on_predict_start(self) -> None:
        """Prediction begins."""

    def on_predict_end(self) -> None:
        """Prediction ended."""

    def on_predict_epoch_start(self) -> None:
        """Before the first predict batch."""

    def on_predict_epoch_end(self) -> None:
        """After the last predict batch."""

    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before a predict batch."""

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """After a predict batch."""

    def on_before_backward(self, loss: torch.Tensor) -> None:
        """Before backward, with the loss already divided for accumulation."""

    def on_after_backward(self) -> None:
        """After each backward."""

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Once per window: gradients synced and unscaled, before clipping and the step."""

    def on_before_zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """After the step, before gradients are cleared."""

    def on_validation_model_zero_grad(self) -> None:
        """Inside fit, before a validation run that follows an optimizer step: release the gradients."""
        self.zero_grad()

    def on_validation_model_eval(self) -> None:
        """Before validation: put the module in eval mode (Lightning's default)."""
        self.eval()

    def on_validation_model_train(self) -> None:
        """After validation: put the module back in train mode (Lightning's default)."""
        self.train()

    def on_test_model_eval(self) -> None:
        """Before testing: put the module in eval mode."""
        self.eval()

    def on_test_model_train(self) -> None:
        """After testing: back to train mode."""
        self.train()

    def on_predict_model_eval(self) -> None:
        """Before predicting: put the module in eval mode."""
        self.eval()

    def on_predict_model_train(self) -> None:
        """After predicting: back to train mode (Lightning defines it; its loop never calls it)."""
        self.train()

    # -- the optimization step (automatic optimization; Lightning's signatures and defaults) ----
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Backward of one micro batch's loss (already divided for accumulation, scaled under fp16)."""
        loss.backward(*args, **kwargs)

    def optimizer_step(
        self,
        epoch: int,
        batch_idx: int,
        optimizer: Any,
        optimizer_closure: Callable[[], Any] | None = None,
    ) -> None:
        """Step at a window's end. ``optimizer_closure`` runs the window's last ``training_step`` and
        backward; ``optimizer.step(closure=optimizer_closure)`` runs it, then clipping and the step."""
        optimizer.step(closure=optimizer_closure)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: torch.optim.Optimizer) -> None:
        """Clear the gradients. Overridden, it runs as in Lightning: in each window's first micro
        batch, after ``training_step`` and before ``backward``."""
        optimizer.zero_grad()

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Step one scheduler when its interval and frequency say so; ``metric`` is a monitored value or None."""
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip after ``on_before_optimizer_step`` (gradients unscaled); by default the Trainer's setting."""
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def configure_callbacks(self) -> Any:
        """Callbacks the module brings: added to the Trainer's at each run, replacing ones of the same type."""
        return []

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add entries to a checkpoint being saved."""

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Read entries from a checkpoint being restored."""

    # -- logging ----------------------------------------------------------------------------
    def log(
        self,
        name: str,
        value: Any,
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Callable[..., Any] = "mean",
        *,
        sync_dist: bool = False,
        batch_size: int | None = None,
        reduce: str | Callable[..., Any] | None = None,
    ) -> None:
        """Record a scalar metric (Lightning's arguments, in Lightning's positional order).

        Defaults follow Lightning: in ``training_step`` and the training batch hooks
        ``on_step=True, on_epoch=False``; elsewhere ``on_step=False, on_epoch=True``. Epoch
        values are means weighted by batch size (or ``reduce_fx="sum"|"max"|"min"``, or
        torch.mean/sum/max/min; ``reduce`` is an older name of ``reduce_fx``);
        ``sync_dist=True`` reduces them across ranks exactly. ``logger=False``: kept in
        ``trainer.callback_metrics`` (and the progress bar) but not sent to the loggers.
        ``value`` may be a torchmetrics ``Metric``: computed at the epoch end, synced over ranks
        by itself, then reset (docs/train-module.md).
        """
        trainer = self._trainer
        if trainer is None:
            raise RuntimeError(
                f"self.log({name!r}) was called outside a Trainer run; call it from a step or hook "
                "during trainer.fit/validate/test."
            )
        if reduce is not None:
            if reduce_fx != "mean" and reduce_fx != reduce:
                raise ValueError(f"self.log({name!r}): give reduce_fx or its older name reduce, not both")
            reduce_fx = reduce
        store = trainer.metric_logger.active
        store.log(
            name,
            value,
            prog_bar=prog_bar,
            logger=logger is not False,
            on_step=on_step,
            on_epoch=on_epoch,
            sync_dist=sync_dist,
            reduce=reduce_fx,
            batch_size=batch_size,
        )
        if sync_dist and store.step_sync is not None:  # under the runner on several ranks (MetricLogger.start_run)
            store.reduce_step_value(name)

    def log_dict(
        self,
        dictionary: Mapping[str, Any],
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Callable[..., Any] = "mean",
        **kwargs: Any,
    ) -> None:
        """``self.log`` for every item of ``dictionary`` (a dict, or a torchmetrics MetricCollection)."""
        for name, value in dictionary.items():
            self.log(name, value, prog_bar, logger, on_step, on_epoch, reduce_fx, **kwargs)

    @property
    def loggers(self) -> list[Any]:
        """The Trainer's loggers (empty when not attached or ``logger=False``)."""
        return list(self._trainer.loggers) if self._trainer is not None else []

    @property
    def logger(self) -> Any:
        """The first logger, or None; ``self.logger.experiment`` is e.g. TensorBoard's ``SummaryWriter``."""
        loggers = self.loggers
        return loggers[0] if loggers else None

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank 0 only, written above the progress bar when one is drawn."""
        if self.global_rank != 0:
            return
        callbacks = self._trainer.callbacks if self._trainer is not None else []
        # the role a progress bar declares
        bars = [cb for cb in callbacks if cb.role == "progress_bar" and isinstance(cb, ProgressBarView)]
        if bars and bars[0].is_enabled and "file" not in kwargs:
            bars[0].print(*args, **kwargs)
        else:
            print(*args, **kwargs)

    # -- checkpoints ------------------------------------------------------------------------
    @classmethod
    def load_from_checkpoint(
        cls: type[_M],
        checkpoint_path: str | os.PathLike[str],
        map_location: torch.device | str | None = None,
        strict: bool = True,
        weights_only: bool | None = None,
        **hparam_overrides: Any,
    ) -> _M:
        """A module rebuilt from a checkpoint: ``cls(**saved hparams, **hparam_overrides)`` with the
        saved weights, in eval mode on ``map_location`` (CPU by default). ``strict`` is
        ``load_state_dict``'s. The file is read with ``weights_only=True`` unless
        ``weights_only=False`` (it then unpickles anything: only for files you trust)."""
        safe = check_weights_only(weights_only)
        return load_module(cls, checkpoint_path, map_location, strict, hparam_overrides, weights_only=safe)

    # -- optimizers (manual optimization: docs/train-module.md) ---------------------------------
    def optimizers(self) -> Any:
        """The optimizer (one) or the list of them, in ``configure_optimizers`` order.

        Under manual optimization they are `ManualOptimizer` wrappers whose ``step()`` runs the
        precision plugin and the step hooks and counts ``global_step``; otherwise the optimizers.
        """
        optimization = self.trainer.fit_loop.optimization
        opts = optimization.module_optimizers if optimization is not None else list(self.trainer.optimizers)
        return opts[0] if len(opts) == 1 else opts

    def lr_schedulers(self) -> Any:
        """The scheduler (one), the list of them, or None. Under manual optimization you step them."""
        scheds = [cfg.scheduler for cfg in self.trainer.lr_scheduler_configs]
        if not scheds:
            return None
        return scheds[0] if len(scheds) == 1 else scheds

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Backward for manual optimization: hooks, precision (loss scaling), gradient sync over ranks.

        Use it instead of ``loss.backward()``. Under a distributed strategy every call averages the
        gradients over the ranks, except inside `no_backward_sync`.
        """
        self._manual("manual_backward").backward(loss, *args, **kwargs)

    def no_backward_sync(self) -> contextlib.AbstractContextManager[None]:
        """Context: ``manual_backward`` calls inside do not sync gradients over ranks.

        For manual accumulation: run the first N-1 micro batches' backward inside it, the last one
        outside; that backward syncs the sum, exactly as one backward of the whole batch would.
        """
        self._manual("no_backward_sync")
        return self.trainer.strategy.block_backward_sync()

    def clip_gradients(
        self,
        optimizer: Any,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip ``optimizer``'s gradients by global norm (default) or by value, unscaled first under fp16.

        Manual optimization: before ``opt.step()``. Automatic: from ``configure_gradient_clipping``
        (``None`` takes the Trainer's ``gradient_clip_val`` / ``gradient_clip_algorithm``).
        """
        optimization = self.trainer.fit_loop.optimization
        if optimization is None:
            raise RuntimeError("self.clip_gradients() is called during fit, from training_step or configure_gradient_clipping.")
        optimization.clip(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def toggle_optimizer(self, optimizer: Any) -> None:
        """Only ``optimizer``'s parameters require grad until `untoggle_optimizer` (as in Lightning)."""
        target, saved = _unwrap(optimizer), self._toggled_state()
        for opt in self.trainer.optimizers:
            for param in _parameters(opt):
                if param not in saved:
                    saved[param] = param.requires_grad
                    param.requires_grad = False
        for param in _parameters(target):
            param.requires_grad = saved[param]

    def untoggle_optimizer(self, optimizer: Any) -> None:
        """Give the other optimizers' parameters back the ``requires_grad`` they had at `toggle_optimizer`."""
        target, saved = _unwrap(optimizer), self._toggled_state()
        for opt in self.trainer.optimizers:
            if opt is not target:
                for param in _parameters(opt):
                    if param in saved:
                        param.requires_grad = saved[param]
        saved.clear()

    @contextlib.contextmanager
    def toggled_optimizer(self, optimizer: Any) -> Iterator[None]:
        """`toggle_optimizer` for the ``with`` block, `untoggle_optimizer` after it."""
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    def _toggled_state(self) -> dict[torch.Tensor, bool]:
        state = self.__dict__.get("_param_requires_grad_state")
        if state is None:
            state = self.__dict__["_param_requires_grad_state"] = {}
        return state

    def _manual(self, what: str) -> Any:  # the loop's ManualOptimization
        optimization = self.trainer.fit_loop.optimization
        if optimization is None or not optimization.manual:
            raise RuntimeError(
                f"self.{what}() is for manual optimization: set self.automatic_optimization = False "
                "in __init__ (docs/train-module.md), and call it from training_step during fit."
            )
        return optimization

    # -- the module's own API (Lightning's) --------------------------------------------------
    def freeze(self: _M) -> _M:
        """No parameter requires grad, and eval mode; returns the module."""
        for param in self.parameters():
            param.requires_grad = False
        return self.eval()

    def unfreeze(self: _M) -> _M:
        """Every parameter requires grad, and train mode; returns the module."""
        for param in self.parameters():
            param.requires_grad = True
        return self.train()

    def all_gather(self, data: Any, group: Any = None, sync_grads: bool = False) -> Any:
        """Every rank's tensors (in ``data``: a tensor or a container of them) stacked on a new first
        dimension of size W; one process: ``data`` with that dimension added. ``sync_grads=True``
        lets gradients flow back to every rank's input."""
        from trainer.data.batch import apply_to_tensors

        if group is not None:
            raise ValueError("all_gather(group=...) is not supported: Lockstep gathers over the whole run.")
        strategy = self._trainer.strategy if self._trainer is not None else None
        if strategy is None or strategy.world_size == 1:
            return apply_to_tensors(data, lambda t: t.unsqueeze(0))
        if sync_grads:
            from torch.distributed.nn.functional import all_gather as differentiable_all_gather

            return apply_to_tensors(data, lambda t: torch.stack(differentiable_all_gather(t.contiguous())))
        return apply_to_tensors(data, strategy.all_gather)

    @torch.no_grad()
    def to_torchscript(
        self,
        file_path: str | os.PathLike[str] | None = None,
        method: str = "script",
        example_inputs: Any = None,
        **kwargs: Any,
    ) -> Any:
        """The module compiled by ``torch.jit.script`` (or ``method="trace"`` on ``example_inputs``,
        default ``self.example_input_array``), in eval mode; saved to ``file_path`` when given."""
        if method not in ("script", "trace"):
            raise ValueError(f"to_torchscript(method=...) is 'script' or 'trace', got {method!r}.")
        inputs = example_inputs if example_inputs is not None else self.example_input_array
        if method == "trace" and inputs is None:
            raise ValueError("to_torchscript(method='trace') needs example_inputs or self.example_input_array.")
        mode = self.training
        self.__dict__["_scripting"] = True  # torch.jit reads every attribute: `trainer` must not raise
        try:
            if method == "script":
                compiled = torch.jit.script(self.eval(), **kwargs)
            else:
                compiled = torch.jit.trace(self.eval(), example_inputs=self._example_on_device(inputs), **kwargs)
        finally:
            self.__dict__.pop("_scripting")
            self.train(mode)
        if file_path is not None:
            torch.jit.save(compiled, os.fspath(file_path))
        return compiled

    @torch.no_grad()
    def to_onnx(self, file_path: str | os.PathLike[str], input_sample: Any = None, **kwargs: Any) -> None:
        """Export to ONNX with ``torch.onnx.export`` (needs the ``onnx`` package), on ``input_sample``
        (default ``self.example_input_array``)."""
        inputs = input_sample if input_sample is not None else self.example_input_array
        if inputs is None:
            raise ValueError("to_onnx needs input_sample or self.example_input_array.")
        mode = self.training
        torch.onnx.export(self.eval(), self._example_on_device(inputs), os.fspath(file_path), **kwargs)
        self.train(mode)

    def _example_on_device(self, inputs: Any) -> Any:
        from trainer.accelerators.accelerator import move_to_device

        return move_to_device(inputs, self.device)

    @property
    def on_gpu(self) -> bool:
        """Whether the module's parameters are on a CUDA device."""
        return self.device.type == "cuda"

    @property
    def dtype(self) -> torch.dtype:
        """The floating-point dtype of the module's parameters (``torch.float32`` when it has none)."""
        for p in self.parameters():
            if p.is_floating_point():
                return p.dtype
        return torch.get_default_dtype()

    # -- where am I -------------------------------------------------------------------------
    @property
    def trainer(self) -> Trainer:
        """The Trainer running this module."""
        if self._trainer is None and not self.__dict__.get("_scripting"):
            raise RuntimeError(f"{type(self).__name__} is not attached to a Trainer")
        return self._trainer  # type: ignore[return-value]

    @trainer.setter
    def trainer(self, trainer: Trainer | None) -> None:
        """Attach the module to the Trainer that runs it (the Trainer does this at every run)."""
        self._trainer = trainer

    @property
    def device(self) -> torch.device:
        """The device the module's parameters live on (after ``.to(...)`` too); during a run, before
        they exist or while they are on the meta device, the strategy's device."""
        for p in self.parameters():
            if p.device.type != "meta":
                return p.device
            break
        if self._trainer is not None:
            return self._trainer.strategy.root_device
        return torch.device("cpu")

    @property
    def global_rank(self) -> int:
        """This process's rank among all processes."""
        return self._trainer.global_rank if self._trainer is not None else 0

    @property
    def local_rank(self) -> int:
        """This process's rank on its node."""
        return self._trainer.local_rank if self._trainer is not None else 0

    @property
    def node_rank(self) -> int:
        """This node's rank."""
        return self._trainer.node_rank if self._trainer is not None else 0

    @property
    def world_size(self) -> int:
        """Number of processes (W)."""
        return self._trainer.world_size if self._trainer is not None else 1

    @property
    def current_epoch(self) -> int:
        """The current (0-based) epoch."""
        return self._trainer.current_epoch if self._trainer is not None else 0

    @property
    def global_step(self) -> int:
        """Optimizer steps taken so far."""
        return self._trainer.global_step if self._trainer is not None else 0


# torch.jit.script compiles properties and annotated attributes unless listed here: the
# Trainer-facing ones are not TorchScript
_NOT_SCRIPTED = [
    *(n for cls in TrainModule.__mro__ for n, v in vars(cls).items() if isinstance(v, property)),
    *(n for cls in TrainModule.__mro__ if cls is not nn.Module for n in vars(cls).get("__annotations__", {})),
]
# (torch.jit reads these two class attributes; nn.Module does not declare them for the type checker)
TrainModule.__jit_unused_properties__ = [  # type: ignore[attr-defined]
    *getattr(nn.Module, "__jit_unused_properties__", ()), *_NOT_SCRIPTED
]
TrainModule.__jit_ignored_attributes__ = list(_NOT_SCRIPTED)  # type: ignore[attr-defined]


def _unwrap(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer behind ``optimizer`` (manual optimization hands out wrappers)."""
    return optimizer if isinstance(optimizer, torch.optim.Optimizer) else optimizer.optimizer


def _parameters(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]
