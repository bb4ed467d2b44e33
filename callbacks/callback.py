"""The `Callback` base class: every hook the Trainer calls, as a no-op."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # imports for annotations only: keep `import callbacks` cheap
    import torch

    from trainer.contracts.protocols import ModuleView, TrainerView


class Callback:
    """Base class for callbacks. Override only the hooks you need.

    Every hook receives ``(trainer, module, ...)``. The Trainer calls a hook only on callbacks
    that override it, so an unused hook costs nothing. The order in which hooks run is in
    ``docs/callbacks.md``.
    """

    # The default this callback stands in for (one of `trainer.contracts.hook_names.ROLES`): the
    # Trainer finds its checkpoint callbacks, and skips a default, by this role, not by class.
    role: ClassVar[str | None] = None
    # Acts on monitored metrics: its ``on_train_epoch_end`` runs after the module's (which may log).
    monitors_metrics: ClassVar[bool] = False

    @property
    def state_key(self) -> str:
        """Key under which this callback's ``state_dict`` is stored in a checkpoint."""
        return type(self).__qualname__

    # -- set-up and tear-down -------------------------------------------------------------
    def setup(self, trainer: TrainerView, pl_module: ModuleView, stage: str) -> None:
        """Called at the start of fit/validate/test/predict, on every rank."""

    def teardown(self, trainer: TrainerView, pl_module: ModuleView, stage: str) -> None:
        """Called at the end of fit/validate/test/predict, also after an exception."""

    def on_fit_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called when fit begins, after set-up."""

    def on_fit_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called when fit ends normally."""

    def on_sanity_check_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called before the sanity validation steps."""

    def on_sanity_check_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called after the sanity validation steps."""

    # -- training -------------------------------------------------------------------------
    def on_train_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called before the first training epoch."""

    def on_train_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called after the last training epoch."""

    def on_train_epoch_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called at the start of each training epoch."""

    def on_train_epoch_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called at the end of each training epoch (after its validation, if any)."""

    def on_train_batch_start(self, trainer: TrainerView, pl_module: ModuleView, batch: Any, batch_idx: int) -> None:
        """Called before a training micro batch's forward."""

    def on_train_batch_end(
        self, trainer: TrainerView, pl_module: ModuleView, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Called after a training micro batch (and after the optimizer step that ends a window)."""

    def on_before_backward(self, trainer: TrainerView, pl_module: ModuleView, loss: torch.Tensor) -> None:
        """Called before ``loss.backward()`` with the (already accumulation-scaled) loss."""

    def on_after_backward(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called after each backward."""

    def on_before_optimizer_step(self, trainer: TrainerView, pl_module: ModuleView, optimizer: Any) -> None:
        """Called once per window, after gradients are synced and unscaled, before clipping."""

    def on_before_zero_grad(self, trainer: TrainerView, pl_module: ModuleView, optimizer: Any) -> None:
        """Called after the optimizer step, before gradients are cleared."""

    # -- evaluation -----------------------------------------------------------------------
    def on_validation_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called when a validation run (or the sanity check) begins."""

    def on_validation_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called when a validation run ends."""

    def on_validation_epoch_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called before the first validation batch."""

    def on_validation_epoch_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called after the last validation batch; epoch metrics are in ``callback_metrics``."""

    def on_validation_batch_start(
        self, trainer: TrainerView, pl_module: ModuleView, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Called before a validation batch."""

    def on_validation_batch_end(
        self,
        trainer: TrainerView,
        pl_module: ModuleView,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """Called after a validation batch."""

    def on_test_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called when testing begins."""

    def on_test_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called when testing ends."""

    def on_test_epoch_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called before the first test batch."""

    def on_test_epoch_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called after the last test batch."""

    def on_test_batch_start(
        self, trainer: TrainerView, pl_module: ModuleView, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Called before a test batch."""

    def on_test_batch_end(
        self,
        trainer: TrainerView,
        pl_module: ModuleView,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """Called after a test batch."""

    def on_predict_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called when prediction begins."""

    def on_predict_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called when prediction ends."""

    def on_predict_epoch_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called before the first predict batch."""

    def on_predict_epoch_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        """Called after the last predict batch."""

    def on_predict_batch_start(
        self, trainer: TrainerView, pl_module: ModuleView, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Called before a predict batch."""

    def on_predict_batch_end(
        self,
        trainer: TrainerView,
        pl_module: ModuleView,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """Called after a predict batch."""

    # -- failures and checkpoints ---------------------------------------------------------
    def on_exception(self, trainer: TrainerView, pl_module: ModuleView, exception: BaseException) -> None:
        """Called when fit/validate/test/predict raises, before teardown."""

    def on_save_checkpoint(self, trainer: TrainerView, pl_module: ModuleView, checkpoint: dict[str, Any]) -> None:
        """Called while a checkpoint dict is built; may add entries to it."""

    def on_load_checkpoint(self, trainer: TrainerView, pl_module: ModuleView, checkpoint: dict[str, Any]) -> None:
        """Called while a checkpoint is restored."""

    def state_dict(self) -> dict[str, Any]:
        """State to save in checkpoints (empty by default)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
