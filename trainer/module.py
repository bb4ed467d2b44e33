"""`TrainModule`: the user's model, its steps, its optimizers and its hooks."""
from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, TypeVar

import torch
from torch import nn

from trainer.checkpointing.from_checkpoint import load_module
from trainer.data.data_hooks import DataHooks
from trainer.hyperparameters import HyperparametersMixin

if TYPE_CHECKING:
    from trainer.contracts.protocols import TrainerInternals as Trainer


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
        trainer.metric_logger.active.log(
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
        bars = [cb for cb in callbacks if cb.role == "progress_bar"]  # the role a progress bar declares
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
        **hparam_overrides: Any,
    ) -> _M:
        """A module rebuilt from a checkpoint: ``cls(**saved hparams, **hparam_overrides)`` with the
        saved weights (loaded with ``weights_only=True``), in eval mode on ``map_location`` (CPU by
        default). ``strict`` is ``load_state_dict``'s."""
        return load_module(cls, checkpoint_path, map_location, strict, hparam_overrides)

    # -- optimizers (manual optimization: docs/train-module.md) ---------------------------------
    def optimizers(self) -> Any:
        """The optimizer (one) or the list of them, in ``configure_optimizers`` order.

        Under manual optimization they are `ManualOptimizer` wrappers whose ``step()`` runs the
        precision plugin and the step hooks and counts ``global_step``; otherwise the optimizers.
        """
        manual = self.trainer.fit_loop.manual
        opts: list[Any] = list(manual.optimizers) if manual is not None else list(self.trainer.optimizers)
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
        """Clip ``optimizer``'s gradients by global norm (default) or by value, unscaled first under fp16."""
        self._manual("clip_gradients").clip(optimizer, gradient_clip_val, gradient_clip_algorithm)

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
        manual = self.trainer.fit_loop.manual
        if manual is None:
            raise RuntimeError(
                f"self.{what}() is for manual optimization: set self.automatic_optimization = False "
                "in __init__ (docs/train-module.md), and call it from training_step during fit."
            )
        return manual

    # -- where am I -------------------------------------------------------------------------
    @property
    def trainer(self) -> Trainer:
        """The Trainer running this module."""
        if self._trainer is None:
            raise RuntimeError(f"{type(self).__name__} is not attached to a Trainer")
        return self._trainer

    @trainer.setter
    def trainer(self, trainer: Trainer | None) -> None:
        """Attach the module to the Trainer that runs it (the Trainer does this at every run)."""
        self._trainer = trainer

    @property
    def device(self) -> torch.device:
        """The device the module's parameters live on (the strategy's device during a run)."""
        if self._trainer is not None:
            return self._trainer.strategy.root_device
        for p in self.parameters():
            return p.device
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


def _unwrap(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer behind ``optimizer`` (manual optimization hands out wrappers)."""
    return optimizer if isinstance(optimizer, torch.optim.Optimizer) else optimizer.optimizer


def _parameters(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]
