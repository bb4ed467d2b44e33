"""`LearningRateFinder` and the learning-rate range test behind `Tuner.lr_find` (Lightning's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch

from callbacks._tuning import find_attr, inner_trainer, restored_module
from callbacks.callback import Callback
from trainer.contracts.arguments import check_bool, check_int, check_number, check_str, hint_misspelled_arguments
from trainer.contracts.user_line import user_stacklevel

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView


def check_range_test_arguments(
    caller: str,
    min_lr: Any,
    max_lr: Any,
    num_training: Any,
    mode: Any,
    early_stop_threshold: Any,
    steps_name: str = "num_training",
) -> None:
    """Refuse bad range-test arguments by name (``caller(min_lr)``...), before anything runs.

    The rates must be finite and positive (the exponential schedule takes ``(max_lr / min_lr) ** r``:
    0 divides by zero, a negative base gives complex rates, NaN trains at NaN), ``min_lr < max_lr``,
    the steps an int >= 1, ``mode`` ``"exponential"`` or ``"linear"``, the threshold None or > 0.
    """
    check_number(f"{caller}(min_lr)", min_lr, above=0)
    check_number(f"{caller}(max_lr)", max_lr, above=0)
    if min_lr >= max_lr:
        raise ValueError(
            f"{caller}(min_lr={min_lr!r}, max_lr={max_lr!r}): min_lr must be below max_lr "
            "(the test raises the rate from min_lr to max_lr)."
        )
    check_int(f"{caller}({steps_name})", num_training, minimum=1)
    if mode not in ("linear", "exponential"):
        raise ValueError(f"{caller}(mode={mode!r}): use 'exponential' or 'linear'.")
    check_number(f"{caller}(early_stop_threshold)", early_stop_threshold, above=0, allow_none=True)


class LRFinder:
    """The results of a range test: ``results["lr"]`` and the smoothed ``results["loss"]`` per step.

    Args:
        mode: ``"exponential"`` or ``"linear"``: how the rate grows from step to step.
        lr_min: The first rate.
        lr_max: The rate reached after ``num_training`` steps.
        num_training: Steps of the test.
    """

    def __init__(self, mode: str, lr_min: float, lr_max: float, num_training: int) -> None:
        if mode not in ("linear", "exponential"):
            raise ValueError(f"lr_find(mode={mode!r}): use 'exponential' or 'linear'.")
        self.mode = mode
        self.lr_min = lr_min
        self.lr_max = lr_max
        self.num_training = num_training
        self.results: dict[str, list[float]] = {"lr": [], "loss": []}
        self._optimal_idx: int | None = None

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The rate where the loss falls fastest (steepest negative gradient), skipping the first
        ``skip_begin`` and the last ``skip_end`` points; None when fewer than two finite points remain."""
        losses = torch.tensor(self.results["loss"][skip_begin:-skip_end])
        lrs = torch.tensor(self.results["lr"][skip_begin:-skip_end])
        finite = torch.isfinite(losses)
        losses, lrs = losses[finite], lrs[finite]
        if len(losses) < 2:
            self._optimal_idx = None
            return None
        gradients = torch.gradient(losses, spacing=[lrs])[0]
        kept = torch.arange(len(self.results["loss"]))[skip_begin:-skip_end][finite]
        self._optimal_idx = int(kept[int(torch.argmin(gradients))])
        return self.results["lr"][self._optimal_idx]

    def plot(self, suggest: bool = False, show: bool = False, ax: Any = None) -> Any:
        """The loss against the rate as a matplotlib figure (``suggest``: the suggestion in red)."""
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("LRFinder.plot() needs matplotlib: pip install matplotlib") from None
        lrs, losses = self.results["lr"], self.results["loss"]
        if ax is None:
            fig, ax = plt.subplots()
        else:
            fig = ax.figure
        ax.plot(lrs, losses)
        if self.mode == "exponential":
            ax.set_xscale("log")
        ax.set_xlabel("Learning rate")
        ax.set_ylabel("Loss")
        if suggest:
            self.suggestion()
            if self._optimal_idx:
                ax.plot(lrs[self._optimal_idx], losses[self._optimal_idx], markersize=10, marker="o", color="red")
        if show:
            plt.show()
        return fig


class _RangeSchedule(torch.optim.lr_scheduler.LRScheduler):
    """From each group's start rate to ``end_lr`` over ``num_iter`` steps, linearly or exponentially."""

    def __init__(self, optimizer: torch.optim.Optimizer, end_lr: float, num_iter: int, exponential: bool) -> None:
        self.end_lr, self.num_iter, self.exponential = end_lr, num_iter, exponential
        self.lr: list[float | torch.Tensor] = []
        super().__init__(optimizer)

    def get_lr(self) -> list[float | torch.Tensor]:
        r = (self.last_epoch + 1) / self.num_iter
        if self.last_epoch <= 0:
            self.lr = list(self.base_lrs)
        elif self.exponential:
            self.lr = [base * (self.end_lr / base) ** r for base in self.base_lrs]
        else:
            self.lr = [base + r * (self.end_lr - base) for base in self.base_lrs]
        return self.lr


class _RangeRecorder(Callback):
    """Records the rate before and the smoothed loss after each optimizer step; stops on divergence."""

    def __init__(self, early_stop_threshold: float | None, beta: float = 0.98) -> None:
        self.early_stop_threshold = early_stop_threshold
        self.beta = beta
        self.lrs: list[float] = []
        self.losses: list[float] = []
        self.avg_loss = 0.0
        self.best_loss = 0.0

    def _window_end(self, trainer: TrainerView, batch_idx: int) -> bool:
        return (batch_idx + 1) % trainer.accumulate_grad_batches == 0

    def on_train_batch_start(self, trainer: TrainerView, pl_module: ModuleView, batch: Any, batch_idx: int) -> None:
        if self._window_end(trainer, batch_idx):
            schedule = trainer.lr_scheduler_configs[0].scheduler
            assert isinstance(schedule, _RangeSchedule)  # the finder's own (it wraps configure_optimizers)
            self.lrs.append(float(schedule.lr[0]))

    def on_train_batch_end(
        self, trainer: TrainerView, pl_module: ModuleView, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self._window_end(trainer, batch_idx):
            return
        if not outputs:
            self.losses.append(float("nan"))
            return
        loss = float((outputs if isinstance(outputs, torch.Tensor) else outputs["loss"]).item())
        step = trainer.global_step
        self.avg_loss = self.beta * self.avg_loss + (1 - self.beta) * loss
        smoothed = self.avg_loss / (1 - self.beta ** (step + 1))
        if self.early_stop_threshold is not None and step > 1 and smoothed > self.early_stop_threshold * self.best_loss:
            trainer.should_stop = True
        if smoothed < self.best_loss or step == 1:
            self.best_loss = smoothed
        self.losses.append(smoothed)


def lr_find(
    trainer: TrainerView,
    model: ModuleView,
    train_dataloaders: Any,
    val_dataloaders: Any,
    datamodule: Any,
    min_lr: float,
    max_lr: float,
    num_training: int,
    mode: str,
    early_stop_threshold: float | None,
    update_attr: bool,
    attr_name: str,
) -> LRFinder | None:
    """The range test: ``num_training`` optimizer steps from ``min_lr`` to ``max_lr`` on ``model``,
    which afterwards has its weights back (and, with ``update_attr``, the suggested rate).

    No defaults: its callers' signatures (`Tuner.lr_find`, `LearningRateFinder`) have them."""
    check_range_test_arguments("lr_find", min_lr, max_lr, num_training, mode, early_stop_threshold)
    check_bool("lr_find(update_attr)", update_attr)
    check_str("lr_find(attr_name)", attr_name)
    if trainer.fast_dev_run:
        import warnings

        warnings.warn("Skipping the learning rate finder: fast_dev_run is on.", stacklevel=user_stacklevel())
        return None
    if update_attr:
        _, set_lr, attr_name = find_attr(model, datamodule, attr_name, ("lr", "learning_rate"), "lr_find")
    finder = LRFinder(mode, min_lr, max_lr, num_training)
    recorder = _RangeRecorder(early_stop_threshold)
    original = model.configure_optimizers

    def range_test_optimizers() -> Any:
        # the module's optimizer, its rates set to min_lr, under the range schedule only
        out = original()
        if isinstance(out, dict):
            out = out["optimizer"]
        elif isinstance(out, (list, tuple)) and len(out) == 2 and isinstance(out[0], (list, tuple)):
            out = out[0]  # (optimizers, schedulers): the schedulers give way to the range schedule
        optimizers = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(optimizers) != 1:
            raise ValueError(f"lr_find works with one optimizer; configure_optimizers returned {len(optimizers)}.")
        # the module's own configure_optimizers (typed object on ModuleView) gave one optimizer
        optimizer = cast("torch.optim.Optimizer", optimizers[0])
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"] = min_lr
        schedule = _RangeSchedule(optimizer, max_lr, num_training, exponential=mode == "exponential")
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    with restored_module(model):
        model.configure_optimizers = range_test_optimizers  # type: ignore[method-assign]
        try:
            # validation runs in the range test as in Lightning (up to num_training batches): its
            # loaders draw from torch's generator, so the curve after the first epoch is Lightning's
            inner = inner_trainer(
                trainer, [recorder], max_steps=num_training, limit_val_batches=num_training, detect_non_finite_loss=False
            )
            # a Trainer (built as type(trainer)); the callbacks' TrainerView has no fit
            inner.fit(model, train_dataloaders, val_dataloaders, datamodule=datamodule)  # type: ignore[attr-defined]
        finally:
            del model.configure_optimizers  # the class's method again
    finder.results = {"lr": recorder.lrs, "loss": recorder.losses}
    if update_attr:
        lr = finder.suggestion()
        if lr is not None:
            set_lr(lr)
            for opt in trainer.optimizers:
                for group in opt.param_groups:
                    group["lr"] = lr
    return finder


class LearningRateFinder(Callback):
    """Runs the range test at fit start and (``update_attr``) starts the fit at the suggested rate.

    Args:
        min_lr: The first rate.
        max_lr: The last rate.
        num_training_steps: Steps of the test.
        mode: ``"exponential"`` or ``"linear"``.
        early_stop_threshold: Stop when the smoothed loss exceeds this times the best one (None: never).
        update_attr: Write the suggestion to the module's ``lr`` / ``learning_rate`` (or ``attr_name``)
            and to the fit's optimizers.
        attr_name: The attribute (or hyperparameter) that holds the rate.

    The result is ``optimal_lr`` (an `LRFinder`). One process only.
    """

    @hint_misspelled_arguments
    def __init__(
        self,
        min_lr: float = 1e-8,
        max_lr: float = 1,
        num_training_steps: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> None:
        check_range_test_arguments(
            "LearningRateFinder", min_lr, max_lr, num_training_steps, mode, early_stop_threshold,
            steps_name="num_training_steps",
        )
        check_bool("LearningRateFinder(update_attr)", update_attr)
        check_str("LearningRateFinder(attr_name)", attr_name)
        # `lr_find`'s settings after its loaders, in its order
        self._settings = (min_lr, max_lr, num_training_steps, mode, early_stop_threshold, update_attr, attr_name)
        self.optimal_lr: LRFinder | None = None

    def lr_find(self, trainer: TrainerView, module: ModuleView) -> None:
        """Run the range test on the fit's training data."""
        self.optimal_lr = lr_find(trainer, module, trainer.train_dataloader, None, None, *self._settings)

    def on_fit_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        self.lr_find(trainer, pl_module)


