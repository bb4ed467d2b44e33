"""`BatchSizeFinder` and the search behind `Tuner.scale_batch_size` (Lightning's algorithm).

Each trial runs ``steps_per_trial`` steps at one batch size; a trial that runs out of memory
(CUDA or the CPU allocator) fails. ``"power"`` doubles until a failure, the dataset's length or
``max_val``; ``"binsearch"`` then bisects between the last success and the failure and takes
``margin`` off. The module gets its weights back after the search and keeps the found size.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any, Callable

from callbacks._tuning import find_attr, inner_trainer, restored_module
from callbacks.callback import Callback
from trainer.contracts.arguments import check_int, check_number, check_str, hint_misspelled_arguments
from trainer.contracts.user_line import user_stacklevel

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView

_OOM_MESSAGES = (
    "CUDA out of memory.",
    "CUDA error: out of memory",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",
    "cuDNN error: CUDNN_STATUS_NOT_INITIALIZED",
    "DefaultCPUAllocator: can't allocate memory",
)


def is_oom_error(error: BaseException | None) -> bool:
    """Whether ``error`` (or an error it was raised from) is an out-of-memory error."""
    while error is not None:
        if isinstance(error, RuntimeError) and any(m in str(error) for m in _OOM_MESSAGES):
            return True
        if type(error).__name__ == "OutOfMemoryError":
            return True
        error = error.__cause__ or error.__context__
    return False


def _free_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def scale_batch_size(trainer: TrainerView, model: ModuleView, datamodule: Any, method: str,
                     finder: BatchSizeFinder) -> int | None:
    """The largest batch size (the module's or DataModule's ``finder.batch_arg_name``) that trains
    without running out of memory, searched with ``finder``'s settings; it is left set there.
    None under ``fast_dev_run``."""
    if method not in ("fit", "validate", "test", "predict"):
        raise ValueError(f"scale_batch_size(method={method!r}): use 'fit', 'validate', 'test' or 'predict'.")
    mode, steps_per_trial, init_val, max_trials = finder.mode, finder.steps_per_trial, finder.init_val, finder.max_trials
    batch_arg_name, margin, max_val = finder.batch_arg_name, finder.margin, finder.max_val
    if trainer.fast_dev_run:
        import warnings

        warnings.warn("Skipping the batch size finder: fast_dev_run is on.", stacklevel=user_stacklevel())
        return None
    get, set_size, _ = find_attr(model, datamodule, batch_arg_name, (), "scale_batch_size")
    source = datamodule if datamodule is not None else model
    loader_hook = {"fit": "train", "validate": "val"}.get(method, method) + "_dataloader"

    def adjust(value: int | None = None, factor: float = 1.0) -> tuple[int, bool]:
        current = get()
        loader = getattr(source, loader_hook)()
        dataset = getattr(loader, "dataset", None)
        try:
            if dataset is not None and current >= len(dataset):
                return current, False  # a bigger batch is the same batch
        except TypeError:  # an iterable dataset: no length
            pass
        new = min(value if value is not None else int(current * factor), max_val)
        set_size(new)
        return new, new != current

    def trial() -> None:
        if method == "fit":
            limits = {"max_steps": steps_per_trial, "limit_train_batches": 1.0, "limit_val_batches": steps_per_trial}
        else:
            limits = {f"limit_{'val' if method == 'validate' else method}_batches": steps_per_trial}
        inner = inner_trainer(trainer, [], **limits)
        getattr(inner, method)(model, datamodule=datamodule)

    with restored_module(model):
        new_size, _ = adjust(value=init_val)
        search = _power if mode == "power" else _binsearch
        new_size = search(trial, adjust, new_size, max_trials, max_val)
        if mode == "binsearch" and margin > 0:
            reduced = max(1, int(new_size * (1 - margin)))
            if reduced != new_size:
                new_size = reduced
                set_size(new_size)
        _free_memory()
    return new_size


def _run(trial: Callable[[], None]) -> bool:
    """Whether a trial ran; an out-of-memory error is a failure, any other error is raised."""
    _free_memory()
    try:
        trial()
    except BaseException as error:  # noqa: BLE001 - the run's error may wrap the OOM
        if not is_oom_error(error):
            raise
        _free_memory()
        return False
    return True


def _power(trial: Callable[[], None], adjust: Callable[..., tuple[int, bool]], size: int, max_trials: int, max_val: int) -> int:
    any_success = False
    for i in range(max_trials):
        if size >= max_val:
            break
        if _run(trial):
            if i + 1 >= max_trials:
                break
            size, changed = adjust(factor=2.0)
            if not changed:
                break
            any_success = True
        else:
            size, _ = adjust(factor=0.5)
            if any_success:
                break
    return size


def _binsearch(trial: Callable[[], None], adjust: Callable[..., tuple[int, bool]], size: int, max_trials: int, max_val: int) -> int:
    low, high, count = 1, None, 0
    while True:
        if size >= max_val:
            break
        if _run(trial):
            last_success = size
            count += 1
            if count >= max_trials:
                size = last_success
                break
            low = size
            if high:
                if high - low <= 1:
                    break
                size, changed = adjust(value=(high + low) // 2)
            else:
                size, changed = adjust(factor=2.0)
            if not changed:
                break
        else:
            high = size
            size, _ = adjust(value=(high + low) // 2)
            if high - low <= 1:
                break
    return size


class BatchSizeFinder(Callback):
    """Finds the largest batch size before the run builds its loaders (in ``setup``).

    Args:
        mode: ``"power"`` (double until failure) or ``"binsearch"`` (then bisect).
        steps_per_trial: Steps run at each size.
        init_val: The first size tried.
        max_trials: The most trials.
        batch_arg_name: The module's (or its hparams', or the DataModule's) attribute to scale.
        margin: ``binsearch``: the fraction taken off the found size.
        max_val: The largest size tried.

    The result is ``optimal_batch_size``. One process only; the loaders must come from the
    module's or DataModule's hooks (loaders passed to ``fit`` have a fixed batch size).
    """

    @hint_misspelled_arguments
    def __init__(
        self,
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
        margin: float = 0.05,
        max_val: int = 8192,
    ) -> None:
        if mode not in ("power", "binsearch"):
            raise ValueError(f"scale_batch_size(mode={mode!r}): use 'power' or 'binsearch'.")
        # 0 steps or a size of 0 would loop on empty trials; a NaN margin would give a NaN size
        for name, value in (("steps_per_trial", steps_per_trial), ("init_val", init_val),
                            ("max_trials", max_trials), ("max_val", max_val)):
            check_int(f"scale_batch_size({name})", value, minimum=1)
        if init_val > max_val:
            raise ValueError(
                f"scale_batch_size(init_val={init_val!r}, max_val={max_val!r}): "
                "init_val must not exceed max_val."
            )
        check_number("scale_batch_size(margin)", margin, minimum=0.0, below=1.0)
        check_str("scale_batch_size(batch_arg_name)", batch_arg_name)
        if not batch_arg_name:
            raise ValueError("scale_batch_size(batch_arg_name) must be a non-empty str, got ''")
        self.mode, self.steps_per_trial, self.init_val = mode, steps_per_trial, init_val
        self.max_trials, self.batch_arg_name, self.margin, self.max_val = max_trials, batch_arg_name, margin, max_val
        self.optimal_batch_size: int | None = init_val

    def scale_batch_size(self, trainer: TrainerView, module: ModuleView, method: str = "fit") -> None:
        """Run the search for ``method``'s loaders."""
        self.optimal_batch_size = scale_batch_size(trainer, module, trainer.datamodule, method, self)

    def setup(self, trainer: TrainerView, pl_module: ModuleView, stage: str) -> None:
        self.scale_batch_size(trainer, pl_module, stage)
