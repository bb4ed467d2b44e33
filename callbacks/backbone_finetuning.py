"""`BackboneFinetuning`: train the head first, then the module's ``backbone`` at a growing rate (Lightning's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

from callbacks._utils import _rank_zero_print
from callbacks.base_finetuning import BaseFinetuning
from trainer.contracts.arguments import hint_misspelled_arguments

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView


def multiplicative(epoch: int) -> float:
    """The default ``lambda_func``: double the backbone's rate every epoch."""
    return 2.0


class BackboneFinetuning(BaseFinetuning):
    """Freezes ``module.backbone`` until ``unfreeze_backbone_at_epoch``, then trains it in a new
    parameter group whose rate grows by ``lambda_func`` each epoch (up to the main rate with ``should_align``).

    Args:
        unfreeze_backbone_at_epoch: The epoch the backbone is unfrozen.
        lambda_func: The factor on the backbone's rate for each later epoch (called with ``epoch + 1``).
        backbone_initial_ratio_lr: The backbone's first rate as a fraction of the main rate.
        backbone_initial_lr: Or that first rate itself.
        should_align: Cap the backbone's rate at the main rate.
        initial_denom_lr: Passed to `unfreeze_and_add_param_group`.
        train_bn: Keep the backbone's BatchNorm layers trainable while it is frozen.
        verbose: Print the rates at each change (global rank 0).
        rounding: Digits of those printed rates.
    """

    @hint_misspelled_arguments
    def __init__(
        self,
        unfreeze_backbone_at_epoch: int = 10,
        lambda_func: Callable[[int], float] = multiplicative,
        backbone_initial_ratio_lr: float = 10e-2,
        backbone_initial_lr: float | None = None,
        should_align: bool = True,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
        verbose: bool = False,
        rounding: int = 12,
    ) -> None:
        super().__init__()
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.verbose = verbose
        self.rounding = rounding
        self.previous_backbone_lr: float | None = None
        self._trainer: TrainerView | None = None

    def state_dict(self) -> dict[str, Any]:
        """The parameter groups and the backbone's last rate."""
        return {**super().state_dict(), "previous_backbone_lr": self.previous_backbone_lr}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        self.previous_backbone_lr = state_dict["previous_backbone_lr"]
        super().load_state_dict(state_dict)

    def setup(self, trainer: TrainerView, pl_module: ModuleView, stage: str) -> None:
        _backbone(pl_module)
        self._trainer = trainer
        super().setup(trainer, pl_module, stage)

    def freeze_before_training(self, pl_module: ModuleView) -> None:
        self.freeze(_backbone(pl_module))

    def finetune_function(self, pl_module: ModuleView, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        if epoch == self.unfreeze_backbone_at_epoch:
            current_lr = optimizer.param_groups[0]["lr"]
            initial = (
                self.backbone_initial_lr
                if self.backbone_initial_lr is not None
                else current_lr * self.backbone_initial_ratio_lr
            )
            self.previous_backbone_lr = initial
            self.unfreeze_and_add_param_group(
                _backbone(pl_module), optimizer, initial, train_bn=self.train_bn, initial_denom_lr=self.initial_denom_lr
            )
            self._report(current_lr, initial)
        elif epoch > self.unfreeze_backbone_at_epoch:
            current_lr = optimizer.param_groups[0]["lr"]
            assert self.previous_backbone_lr is not None
            following = self.lambda_func(epoch + 1) * self.previous_backbone_lr
            following = current_lr if (self.should_align and following > current_lr) else following
            optimizer.param_groups[-1]["lr"] = following
            self.previous_backbone_lr = following
            self._report(current_lr, following)

    def _report(self, current: float, backbone: float) -> None:
        if self.verbose and self._trainer is not None:
            _rank_zero_print(
                self._trainer,
                f"Current lr: {round(current, self.rounding)}, Backbone lr: {round(backbone, self.rounding)}",
            )


def _backbone(module: ModuleView) -> torch.nn.Module:
    backbone = getattr(module, "backbone", None)
    if not isinstance(backbone, torch.nn.Module):
        raise AttributeError(
            f"BackboneFinetuning needs the module to have an nn.Module `backbone` attribute; "
            f"{type(module).__name__} has none."
        )
    return backbone
