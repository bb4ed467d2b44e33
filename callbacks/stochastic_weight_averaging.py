"""`StochasticWeightAveraging`: average the weights of the last epochs under an SWA learning
rate schedule, then recompute the BatchNorm statistics for the average (Lightning's callback)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Callable, Union, cast

import torch
from torch import Tensor, nn
from torch.optim.swa_utils import SWALR

from callbacks.callback import Callback
from trainer.contracts.schedulers import LRSchedulerConfig
from trainer.contracts.arguments import hint_misspelled_arguments
from trainer.contracts.user_line import user_stacklevel

if TYPE_CHECKING:
    from collections.abc import Iterable

    from trainer.contracts.protocols import ModuleView, TrainerView

AvgFn = Callable[[Tensor, Tensor, Tensor], Tensor]


def _is_epoch_start(value: object) -> bool:
    """An epoch (an int >= 1, 1-based) or a fraction of ``max_epochs`` (a float in [0, 1])."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 1
    return isinstance(value, float) and 0 <= value <= 1


def _check_arguments(
    swa_lrs: object, swa_epoch_start: object, annealing_strategy: object, avg_fn: object, device: object
) -> None:
    """`StochasticWeightAveraging`'s arguments, each refused with what it takes."""
    if not _is_epoch_start(swa_epoch_start):
        raise ValueError(
            f"StochasticWeightAveraging(swa_epoch_start={swa_epoch_start!r}): an int >= 1 (the epoch, "
            "1-based) or a float in [0, 1] (a fraction of max_epochs)."
        )
    lrs = swa_lrs if isinstance(swa_lrs, list) else [swa_lrs]
    if not isinstance(swa_lrs, (float, list)) or not all(isinstance(lr, float) and lr > 0 for lr in lrs):
        raise ValueError(
            f"StochasticWeightAveraging(swa_lrs={swa_lrs!r}): a positive float, or a list of positive "
            "floats (one per parameter group)."
        )
    if annealing_strategy not in ("cos", "linear"):
        raise ValueError(f"StochasticWeightAveraging(annealing_strategy={annealing_strategy!r}): 'cos' or 'linear'.")
    if avg_fn is not None and not callable(avg_fn):
        raise TypeError(f"StochasticWeightAveraging(avg_fn={avg_fn!r}): expected a callable.")
    if device is not None and not isinstance(device, (torch.device, str)):
        raise TypeError(f"StochasticWeightAveraging(device={device!r}): a torch.device, a str or None.")


class StochasticWeightAveraging(Callback):
    """Lightning's SWA, same arguments and schedule.

    From epoch ``swa_epoch_start`` (1-based int, or a fraction of ``max_epochs``) the optimizer's
    learning rates follow ``torch.optim.swa_utils.SWALR`` towards ``swa_lrs`` (it replaces the
    module's first scheduler), and at the start of every epoch from then on the weights are added
    to a running average (``avg_fn``, default: the equal-weight mean), kept on ``device``. After the last
    epoch the module gets the averaged weights; with BatchNorm layers their running statistics
    are then recomputed with one forward pass over the training batches (``module(batch[0])`` for a
    tuple batch, in train mode, without gradients) with cumulative averaging, as
    ``torch.optim.swa_utils.update_bn`` does. Lightning runs that pass as an extra epoch (forward
    only); Lockstep at the end of training: the weights and statistics are the same
    (tests/callbacks/test_swa_parity.py), ``current_epoch`` and the checkpoints stay those of
    ``max_epochs``. The average, its count and the schedule are in the checkpoint, so a resumed
    fit ends where an uninterrupted one does. One optimizer, at most one scheduler; no FSDP.
    """

    @hint_misspelled_arguments
    def __init__(
        self,
        swa_lrs: Union[float, list[float]],
        swa_epoch_start: Union[int, float] = 0.8,
        annealing_epochs: int = 10,
        annealing_strategy: str = "cos",
        avg_fn: AvgFn | None = None,
        device: Union[torch.device, str, None] = torch.device("cpu"),
    ) -> None:
        _check_arguments(swa_lrs, swa_epoch_start, annealing_strategy, avg_fn, device)
        self._swa_epoch_start: Union[int, float] = swa_epoch_start
        self._swa_lrs = swa_lrs
        self._annealing_epochs = annealing_epochs
        self._annealing_strategy = annealing_strategy
        self._avg_fn: AvgFn = avg_fn or self.avg_fn
        self._device = device
        self.n_averaged: Tensor | None = None
        self._average: list[Tensor] | None = None  # the averaged parameters, in `parameters()` order
        self._names: list[str] = []
        self._max_epochs = -1
        self._initialized = False
        self._swa_scheduler: SWALR | None = None
        self._scheduler_state: dict[str, Any] | None = None
        self._init_n_averaged = 0
        self._latest_update_epoch = -1
        self._loaded_average: dict[str, Tensor] | None = None

    # -- the schedule (0-based epochs) --------------------------------------------------------
    @property
    def swa_start(self) -> int:
        """First epoch (0-based) whose start weights enter the average."""
        return max(int(self._swa_epoch_start) - 1, 0)

    @property
    def swa_end(self) -> float:
        """Last epoch (0-based) whose start weights enter the average."""
        return float("inf") if self._max_epochs == -1 else self._max_epochs - 1

    @staticmethod
    def avg_fn(averaged: Tensor, current: Tensor, num_averaged: Tensor) -> Tensor:
        """The equal-weight running mean."""
        return averaged + (current - averaged) / (num_averaged + 1)

    # -- hooks ----------------------------------------------------------------------------------
    def setup(self, trainer: TrainerView, pl_module: ModuleView, stage: str) -> None:
        if stage == "fit" and "fsdp" in type(trainer.strategy).__name__.lower():
            raise ValueError("StochasticWeightAveraging does not support sharded models (strategy='fsdp').")

    def on_fit_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if len(trainer.optimizers) != 1:
            raise ValueError(f"StochasticWeightAveraging works with 1 optimizer, got {len(trainer.optimizers)}.")
        if len(trainer.lr_scheduler_configs) > 1:
            raise ValueError("StochasticWeightAveraging works with at most 1 learning-rate scheduler.")
        max_epochs = trainer.max_epochs if trainer.max_epochs is not None else -1
        if isinstance(self._swa_epoch_start, float):
            if max_epochs == -1:
                raise ValueError("StochasticWeightAveraging(swa_epoch_start=<float>) needs max_epochs; give an int epoch.")
            self._swa_epoch_start = int(max_epochs * self._swa_epoch_start)
        self._max_epochs = max_epochs
        named = list(pl_module.named_parameters())
        self._names = [name for name, _ in named]
        device = self._device or next((p.device for _, p in named), torch.device("cpu"))
        self._average = [p.detach().to(device, copy=True) for _, p in named]
        if self._loaded_average is not None:
            for name, avg in zip(self._names, self._average):
                avg.copy_(self._loaded_average[name])
        if self._scheduler_state is not None:
            # resumed during SWA: the restored scheduler slot held SWALR's state; SWALR is rebuilt below
            # the view is read-only (a Sequence); SWA alone replaces the Trainer's list of configs
            cast("list[LRSchedulerConfig]", trainer.lr_scheduler_configs).clear()

    def on_train_epoch_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        epoch = trainer.current_epoch
        in_window = self.swa_start <= epoch <= self.swa_end
        if in_window and not self._initialized:
            self._initialized = True
            self._start_schedule(trainer)
            if self.n_averaged is None:
                self.n_averaged = torch.tensor(self._init_n_averaged, dtype=torch.long)
        if in_window and epoch > self._latest_update_epoch:
            assert self._average is not None and self.n_averaged is not None
            self.update_parameters(self._average, list(pl_module.parameters()), self.n_averaged, self._avg_fn)
            self._latest_update_epoch = epoch

    def on_train_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        # only a fit that trained through the last epoch gets the average (a stopped one keeps its weights)
        if self._average is None or not (self._max_epochs == -1 or trainer.current_epoch - 1 == self.swa_end):
            return
        self.transfer_weights(self._average, list(pl_module.parameters()))
        if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in pl_module.modules()):
            self._update_batch_norm(trainer, pl_module)

    # -- the average ------------------------------------------------------------------------------
    @staticmethod
    def update_parameters(average: list[Tensor], params: list[Tensor], n_averaged: Tensor, avg_fn: AvgFn) -> None:
        """Add ``params`` to the running ``average`` (``n_averaged`` counts the models in it)."""
        for avg, param in zip(average, params):
            current = param.detach().to(avg.device)
            avg.copy_(current if n_averaged == 0 else avg_fn(avg, current, n_averaged.to(avg.device)))
        n_averaged += 1

    @staticmethod
    def transfer_weights(average: list[Tensor], params: list[Tensor]) -> None:
        """Copy the averaged values into the module's parameters."""
        for avg, param in zip(average, params):
            param.detach().copy_(avg.to(param.device))

    def _start_schedule(self, trainer: TrainerView) -> None:
        optimizer = trainer.optimizers[0]
        lrs = self._swa_lrs if isinstance(self._swa_lrs, list) else [self._swa_lrs] * len(optimizer.param_groups)
        for lr, group in zip(lrs, optimizer.param_groups):
            group["initial_lr"] = lr
        # torch types swa_lr a float (it takes one per group too) and anneal_strategy a Literal
        # (__init__ checked it is "cos" or "linear")
        self._swa_scheduler = SWALR(
            optimizer,
            swa_lr=lrs,  # type: ignore[arg-type]
            anneal_epochs=self._annealing_epochs,
            anneal_strategy=self._annealing_strategy,  # type: ignore[arg-type]
            last_epoch=self._max_epochs if self._annealing_strategy == "cos" else -1,
        )
        if self._scheduler_state is not None:
            self._swa_scheduler.load_state_dict(self._scheduler_state)
        elif trainer.current_epoch != self.swa_start:
            warnings.warn(
                "StochasticWeightAveraging starts after swa_start without its checkpoint state.",
                stacklevel=user_stacklevel(),
            )
        configs = cast("list[LRSchedulerConfig]", trainer.lr_scheduler_configs)  # the Trainer's list (above)
        config = LRSchedulerConfig(self._swa_scheduler)
        if configs:
            if configs[0].interval != "epoch" or configs[0].frequency != 1:
                warnings.warn(f"StochasticWeightAveraging replaces a scheduler that steps every "
                              f"{configs[0].frequency} {configs[0].interval}(s) with SWALR, stepped every epoch.",
                              stacklevel=user_stacklevel())
            configs[0] = config
        else:
            configs.append(config)

    def _update_batch_norm(self, trainer: TrainerView, module: ModuleView) -> None:
        norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        momenta = {}
        for bn in norms:
            bn.reset_running_stats()  # zero mean, unit variance, no batches counted
            momenta[bn] = bn.momentum
            bn.momentum = None  # a cumulative average over the pass
        device = next((p.device for p in module.parameters()), torch.device("cpu"))
        limit = trainer.num_training_batches
        was_training = module.training
        module.train()
        try:
            with torch.no_grad():
                # the fit's training loader: set while its callbacks run (None only outside a fit)
                for index, batch in enumerate(cast("Iterable[object]", trainer.train_dataloader)):
                    if limit is not None and index >= limit:
                        break
                    inputs = batch[0] if isinstance(batch, (list, tuple)) else batch
                    module(inputs.to(device) if isinstance(inputs, Tensor) else inputs)
        finally:
            module.train(was_training)
            for bn, momentum in momenta.items():
                bn.momentum = momentum

    # -- checkpoint -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Lightning's keys: the count, the last averaged epoch, SWALR's state and the average."""
        average = None if self._average is None else dict(zip(self._names, self._average))
        return {
            "n_averaged": 0 if self.n_averaged is None else int(self.n_averaged.item()),
            "latest_update_epoch": self._latest_update_epoch,
            "scheduler_state": None if self._swa_scheduler is None else self._swa_scheduler.state_dict(),
            "average_model_state": average,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the average and schedule back (the fit continues them from the next epoch)."""
        self._init_n_averaged = state_dict["n_averaged"]
        self._latest_update_epoch = state_dict["latest_update_epoch"]
        self._scheduler_state = state_dict["scheduler_state"]
        self._loaded_average = state_dict["average_model_state"]
