"""`WeightAveraging` and `EMAWeightAveraging`: an ``AveragedModel`` of the module updated during
training, used for validation and checkpoints, and given to the module at the end (Lightning's
callbacks, same arguments and checkpoint layout)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Optional, Union

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_avg_fn

from callbacks.callback import Callback

from trainer.contracts.protocols import torch_module

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView


class WeightAveraging(Callback):
    """Keeps ``torch.optim.swa_utils.AveragedModel(module, device, use_buffers, **kwargs)`` of the module.

    `should_update` decides after each optimizer step and each training epoch whether the
    average takes the current weights (default: after every step). Validation runs on the
    averaged weights (swapped in and out around it); a checkpoint holds the average as its
    ``state_dict`` (the trained weights under ``current_model_state``, the rest of the average's
    state under ``averaging_state``), so ``load_from_checkpoint`` gives the averaged model and a
    resumed fit continues both. At the end of training the module gets the averaged weights; the
    trained ones are kept, so a checkpoint written after the fit (``trainer.save_checkpoint``, the
    ``last.ckpt`` of a fit stopped by ``max_steps``) has the same layout and resumes the same way.
    """

    def __init__(self, device: Union[torch.device, str, int, None] = None, use_buffers: bool = True,
                 **kwargs: Any) -> None:
        self._device = torch.device(device) if isinstance(device, str) else device
        self._use_buffers = use_buffers
        self._kwargs = kwargs
        self._average_model: Optional[AveragedModel] = None
        self._latest_update_step = 0
        self._latest_update_epoch = -1
        # True once `on_train_end` swapped the average into the module: the AveragedModel then
        # holds the trained weights, which a checkpoint written after the fit must keep.
        self._average_in_module = False

    def should_update(self, step_idx: Optional[int] = None, epoch_idx: Optional[int] = None) -> bool:
        """Whether to update the average after step ``step_idx`` (0-based) or epoch ``epoch_idx``."""
        return step_idx is not None

    # -- hooks ----------------------------------------------------------------------------------
    def setup(self, trainer: TrainerView, pl_module: ModuleView, stage: str) -> None:
        if stage == "fit":
            device = self._device or next((p.device for p in pl_module.parameters()), torch.device("cpu"))
            self._average_model = AveragedModel(model=torch_module(pl_module), device=device, use_buffers=self._use_buffers,
                                                **self._kwargs)
            self._average_in_module = False

    def on_train_batch_end(self, trainer: TrainerView, pl_module: ModuleView, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        # after a micro batch that ended no window, global_step has not moved: nothing new to average
        if trainer.global_step > self._latest_update_step and self.should_update(step_idx=trainer.global_step - 1):
            assert self._average_model is not None
            self._average_model.update_parameters(torch_module(pl_module))
            self._latest_update_step = trainer.global_step

    def on_train_epoch_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if trainer.current_epoch > self._latest_update_epoch and self.should_update(epoch_idx=trainer.current_epoch):
            assert self._average_model is not None
            self._average_model.update_parameters(torch_module(pl_module))
            self._latest_update_epoch = trainer.current_epoch

    def on_train_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        # A swap, not a copy (Lightning copies): the trained weights are the only state a resume
        # can continue from, and the last.ckpt of fit end and any later save_checkpoint need them.
        if self._average_model is not None and not self._average_in_module:
            self._swap(pl_module)
            self._average_in_module = True

    def on_validation_epoch_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if self._average_model is not None and not self._average_in_module:
            self._swap(pl_module)

    def on_validation_epoch_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if self._average_model is not None and not self._average_in_module:
            self._swap(pl_module)

    # -- checkpoint -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"latest_update_step": self._latest_update_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._latest_update_step = state_dict["latest_update_step"]

    def on_save_checkpoint(self, trainer: TrainerView, pl_module: ModuleView, checkpoint: dict[str, Any]) -> None:
        if self._average_model is None:  # outside fit: the module's own weights (averaged after a fit)
            return
        state = self._average_model.state_dict()
        held = {name[7:]: value for name, value in state.items() if name.startswith("module.")}
        if self._average_in_module:  # after the fit the two have traded places
            checkpoint["current_model_state"] = held
        else:
            checkpoint["current_model_state"] = checkpoint["state_dict"]
            checkpoint["state_dict"] = held
        checkpoint["averaging_state"] = {name: value for name, value in state.items() if not name.startswith("module.")}

    def on_load_checkpoint(self, trainer: TrainerView, pl_module: ModuleView, checkpoint: dict[str, Any]) -> None:
        if self._average_model is None:
            return
        if "current_model_state" in checkpoint and "averaging_state" in checkpoint:
            state = {"module." + name: value for name, value in checkpoint["state_dict"].items()}
            self._average_model.load_state_dict({**state, **checkpoint["averaging_state"]})
            torch_module(pl_module).load_state_dict(checkpoint["current_model_state"])
        else:  # a checkpoint written without averaging: both start from its weights
            self._average_model.module.load_state_dict(checkpoint["state_dict"], strict=False)

    def _pairs(self, module: ModuleView) -> Any:
        assert self._average_model is not None
        averaged = self._average_model.module
        return zip(itertools.chain(averaged.parameters(), averaged.buffers()),
                   itertools.chain(module.parameters(), torch_module(module).buffers()))

    def _swap(self, module: ModuleView) -> None:
        for average, current in self._pairs(module):
            kept = average.data.clone()
            average.data.copy_(current.data)
            current.data.copy_(kept)


class EMAWeightAveraging(WeightAveraging):
    """An exponential moving average: ``average = decay * average + (1 - decay) * current``.

    Updated after every ``update_every_n_steps``-th step (0-based index) from step
    ``update_starting_at_step``, or after every epoch from ``update_starting_at_epoch``.
    """

    def __init__(
        self,
        device: Union[torch.device, str, int, None] = None,
        use_buffers: bool = True,
        decay: float = 0.999,
        update_every_n_steps: int = 1,
        update_starting_at_step: Optional[int] = None,
        update_starting_at_epoch: Optional[int] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(device=device, use_buffers=use_buffers, **kwargs, avg_fn=get_ema_avg_fn(decay=decay))
        self.update_every_n_steps = update_every_n_steps
        self.update_starting_at_step = update_starting_at_step
        self.update_starting_at_epoch = update_starting_at_epoch

    def should_update(self, step_idx: Optional[int] = None, epoch_idx: Optional[int] = None) -> bool:
        if step_idx is not None:
            started = self.update_starting_at_step is None or step_idx >= self.update_starting_at_step
            if started and self.update_every_n_steps > 0 and step_idx % self.update_every_n_steps == 0:
                return True
        return epoch_idx is not None and self.update_starting_at_epoch is not None and (
            epoch_idx >= self.update_starting_at_epoch)
