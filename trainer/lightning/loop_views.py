"""Lightning's loop objects as libraries read them: ``trainer.fit_loop.epoch_loop``, its
``batch_progress`` and ``val_loop`` (with ``_data_source`` and its own ``batch_progress``),
``fit_loop.epoch_progress``, ``fit_loop._data_source``... Lockstep's `FitLoop` keeps its own shape
(a position, `FitProgress`, not Lightning's nest of loops and counters): a Lightning name it lacks
is looked up here (`lightning_fit_loop_attribute`, its ``__getattr__``) and answered by a read-only
view built when read, never on the training step's path. The counters equal Lightning's at the
same hooks (tests/project/test_lightning_loop_views.py). Lightning's loop names that Lockstep
does not keep raise `NotProvidedAttributeError` naming what to use (`NOT_PROVIDED_LOOP_ATTRIBUTES`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from trainer.data.datamodule import DataModule, data_source
from trainer.lightning.unsupported import NotProvidedAttributeError
from trainer.module import TrainModule
from trainer.stage import Stage

if TYPE_CHECKING:
    from trainer.contracts.trainer_state import EvaluationRun as EvaluationLoop
    from trainer.contracts.internals import FitLoopInternals as FitLoop

# (ready, started, processed, completed): Lightning's four stages of a counted event
_Stages = tuple[int, int, int, int]

# Lightning's loop attributes Lockstep does not keep, and what to use instead
NOT_PROVIDED_LOOP_ATTRIBUTES: dict[str, str] = {
    "fit_loop._combined_loader": "trainer.train_dataloader",
    "fit_loop._data_fetcher": "trainer.train_dataloader",
    "fit_loop._results": "trainer.callback_metrics",
    "fit_loop.restarting": "the ckpt_path you passed (a resumed fit prints 'Resumed from ...')",
    "fit_loop.epoch_loop.automatic_optimization": "trainer.global_step and the hooks (on_before_optimizer_step)",
    "fit_loop.epoch_loop.manual_optimization": "trainer.global_step and the hooks (on_before_optimizer_step)",
    "fit_loop.epoch_loop.scheduler_progress": "trainer.lr_scheduler_configs",
    "fit_loop.epoch_loop._results": "trainer.callback_metrics",
    "fit_loop.epoch_loop.val_loop._results": "trainer.callback_metrics",
    "fit_loop.epoch_loop.val_loop._combined_loader": "trainer.val_dataloaders",
}


class Counts:
    """Lightning's counters of one event (``ready``, ``started``, ``processed``, ``completed``),
    read live from Lockstep's loop state."""

    def __init__(self, read: Callable[[], _Stages]) -> None:
        self._read = read

    @property
    def ready(self) -> int:
        """Events begun (a batch fetched)."""
        return self._read()[0]

    @property
    def started(self) -> int:
        """Events past their start hook."""
        return self._read()[1]

    @property
    def processed(self) -> int:
        """Events whose step ran."""
        return self._read()[2]

    @property
    def completed(self) -> int:
        """Events past their end hook."""
        return self._read()[3]

    def __repr__(self) -> str:
        return "Counts(ready={}, started={}, processed={}, completed={})".format(*self._read())


class Progress:
    """Lightning's ``_Progress``: the counts over the whole run (``total``) and the current one (``current``)."""

    def __init__(self, read: Callable[[bool], _Stages]) -> None:
        self.total = Counts(lambda: read(True))
        self.current = Counts(lambda: read(False))


class BatchProgress(Progress):
    """Lightning's ``_BatchProgress``: `Progress` and whether the latest batch is its loop's last."""

    def __init__(self, read: Callable[[bool], _Stages], is_last: Callable[[], bool]) -> None:
        super().__init__(read)
        self._is_last = is_last

    @property
    def is_last_batch(self) -> bool:
        """Whether the latest batch is the last of its epoch (of its evaluation run)."""
        return self._is_last()


class DataSource:
    """Lightning's ``_DataLoaderSource``: where a stage's loaders come from (``instance``: the loaders
    given to the call, else the DataModule or module whose hook ``name`` makes them)."""

    def __init__(self, instance: Any, name: str) -> None:
        self.instance = instance
        self.name = name

    def is_module(self) -> bool:
        """Whether the loaders come from a module's or DataModule's hook."""
        return isinstance(self.instance, (TrainModule, DataModule))

    def is_defined(self) -> bool:
        """Whether there are loaders to ask for: given, or the hook is overridden."""
        if not self.is_module():
            return self.instance is not None
        base = TrainModule if isinstance(self.instance, TrainModule) else DataModule
        return getattr(type(self.instance), self.name) is not getattr(base, self.name)

    def dataloader(self) -> Any:
        """The loaders: the given ones, or what the hook returns now."""
        return getattr(self.instance, self.name)() if self.is_module() else self.instance


class _View:
    """A view of one `FitLoop` under Lightning's path ``_path``: a Lightning name it lacks raises
    `NotProvidedAttributeError` where `NOT_PROVIDED_LOOP_ATTRIBUTES` lists it."""

    _path = "fit_loop"

    def __init__(self, loop: FitLoop) -> None:
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        raise _missing(type(self).__name__, f"{self._path}.{name}")


class ValidationLoopView(_View):
    """``fit_loop.epoch_loop.val_loop``: the fit's validation, as Lightning's ``_EvaluationLoop``."""

    _path = "fit_loop.epoch_loop.val_loop"

    @property
    def batch_progress(self) -> BatchProgress:
        """Validation batches: ``current`` in the latest run, ``total`` since the training epoch started."""
        return BatchProgress(lambda total: _val_stages(self._loop, total), lambda: _val_is_last(self._loop))

    @property
    def _data_source(self) -> DataSource:
        given = self._loop.given_loaders[1]
        return DataSource(given if given is not None else _owner(self._loop), "val_dataloader")

    @property
    def num_dataloaders(self) -> int:
        """The fit's validation loaders."""
        return len(self._loop.trainer.val_dataloaders)

    @property
    def max_batches(self) -> list[int | float]:
        """Batches per validation loader in one run (``inf``: a loader without length)."""
        return [float("inf") if n is None else n for n in _val_counts(self._loop)]


class _TrainingView(_View):
    """What Lightning's fit loop and its training epoch loop both answer."""

    @property
    def batch_idx(self) -> int:
        """The latest training batch's index in its epoch (-1 before the first)."""
        return _train_stages(self._loop, False)[0] - 1

    @property
    def total_batch_idx(self) -> int:
        """The latest training batch's index over the fit (-1 before the first)."""
        return _train_stages(self._loop, True)[0] - 1

    @property
    def max_steps(self) -> int:
        """``Trainer(max_steps=...)``."""
        return self._loop.trainer.max_steps

    @property
    def min_steps(self) -> int | None:
        """``Trainer(min_steps=...)``."""
        return self._loop.trainer.min_steps


class TrainingEpochLoopView(_TrainingView):
    """``fit_loop.epoch_loop``: the training epoch, as Lightning's ``_TrainingEpochLoop``."""

    _path = "fit_loop.epoch_loop"

    @property
    def batch_progress(self) -> BatchProgress:
        """Training batches: ``current`` in this epoch, ``total`` in the fit."""
        return BatchProgress(lambda total: _train_stages(self._loop, total), lambda: bool(self._loop.is_last_batch))

    @property
    def val_loop(self) -> ValidationLoopView:
        """The fit's validation loop."""
        return ValidationLoopView(self._loop)

    @property
    def global_step(self) -> int:
        """Optimizer steps taken."""
        return self._loop.progress.global_step

    @property
    def _batches_that_stepped(self) -> int:
        return _batches_that_stepped(self._loop)



class LightningFitLoop(_TrainingView):
    """Lightning's ``_FitLoop`` names that Lockstep's `FitLoop` lacks, read from it."""

    @property
    def epoch_loop(self) -> TrainingEpochLoopView:
        """The training epoch loop."""
        return TrainingEpochLoopView(self._loop)

    @property
    def epoch_progress(self) -> Progress:
        """Epochs: ``processed`` counts one when its batches are done, ``completed`` after its end hooks."""
        return Progress(lambda total: _epoch_stages(self._loop))


    @property
    def done(self) -> bool:
        """Whether training is finished: ``max_steps`` or ``max_epochs`` reached (an epoch counts once its
        batches are done, so its end hooks read True), or ``should_stop`` once the minimums are met."""
        t, steps, epochs = self._loop.trainer, self._loop.progress.global_step, _epoch_stages(self._loop)[2]
        if _reached(steps, self.max_steps) or _reached(epochs, self.max_epochs):
            return True
        return t.should_stop and epochs >= self.min_epochs and steps >= (self.min_steps or 0)

    @property
    def max_epochs(self) -> int:
        """The epoch limit as Lightning resolves it (-1: none, with ``max_steps`` or ``max_time``)."""
        t = self._loop.trainer
        if t.max_epochs is not None:
            return t.max_epochs
        return 1000 if t.max_steps == -1 else -1

    @property
    def min_epochs(self) -> int:
        """The epochs ``should_stop`` waits for, as Lightning resolves it (1 with only ``min_steps``)."""
        t = self._loop.trainer
        if t.min_epochs is not None:
            return t.min_epochs
        return 1 if t.min_steps is not None else 0

    @property
    def _data_source(self) -> DataSource:
        given = self._loop.given_loaders[0]
        return DataSource(given if given is not None else _owner(self._loop), "train_dataloader")


_NAMES = frozenset(name for cls in (LightningFitLoop, _TrainingView) for name in vars(cls) if not name.startswith("__"))


def lightning_fit_loop_attribute(loop: FitLoop, name: str) -> Any:
    """Lightning's ``fit_loop.<name>`` of ``loop`` (`FitLoop.__getattr__`: names it lacks).

    Raises `NotProvidedAttributeError` for one Lockstep does not keep, else Python's `AttributeError`.
    """
    if name in _NAMES:
        return getattr(LightningFitLoop(loop), name)
    raise _missing(type(loop).__name__, f"fit_loop.{name}")


def _missing(owner: str, path: str) -> AttributeError:
    alternative = NOT_PROVIDED_LOOP_ATTRIBUTES.get(path)
    if alternative is None:
        return AttributeError(f"{owner!r} object has no attribute {path.rsplit('.', 1)[1]!r}")
    return NotProvidedAttributeError(
        f"trainer.{path}: Lightning's loop attribute is not provided by Lockstep; use {alternative} (docs/migration.md)."
    )


def _reached(count: int, limit: int) -> bool:
    return limit != -1 and count >= limit


def _owner(loop: FitLoop) -> Any:
    # whose hooks make the loaders: the DataModule, else the module (None before the first run)
    try:
        module = loop.trainer.module
    except RuntimeError:
        return None
    return data_source(loop.trainer, module)


def _train_stages(loop: FitLoop, total: bool) -> _Stages:
    """Lightning's batch counters: a batch is ``ready`` before ``on_train_batch_start``, ``started``
    and ``processed`` around its step, ``completed`` after ``on_train_batch_end``."""
    p = loop.progress
    trained = p.batches_total if total else p.batches_done
    if not loop.trainer.metric_logger.train.in_step:  # between batches: every stage agrees
        if not total and p.batches_done == 0 and p.current_epoch > 0:  # between epochs: still the last one's
            trained = loop.num_training_batches or 0
        return trained, trained, trained, trained
    ended = p.batches_done - p.batch_idx  # 1 once the running batch is trained (its end hook)
    return trained - ended + 1, trained, trained, trained - ended


def _batches_that_stepped(loop: FitLoop) -> int:
    """Lightning's logger step: ``logged_steps`` once the batch has ended, which in Lightning is
    after the validation that follows it."""
    t = loop.trainer
    evaluation = t.state.evaluation
    if t.state.stage is Stage.VALIDATE and evaluation is not None and evaluation.within_fit:
        assert evaluation.log_step is not None  # the fit's validation is given its step
        return evaluation.log_step
    p, steps = loop.progress, loop.logged_steps()
    if not (t.metric_logger.train.in_step and p.batches_done > p.batch_idx):
        return steps
    manual = loop.optimization is not None and loop.optimization.manual
    stepped = manual or loop.is_last_batch or (p.batch_idx + 1) % t.accumulate_grad_batches == 0
    return steps - 1 if stepped else steps


def _epoch_stages(loop: FitLoop) -> _Stages:
    """Lightning's epoch counters: the running epoch is ``ready`` and ``started``; ``processed``
    once its batches are done (its end hooks run), ``completed`` after them."""
    t, epoch = loop.trainer, loop.progress.current_epoch
    if not loop.in_training:
        return epoch, epoch, epoch, epoch
    # the last batch marks the epoch finished: its end hook and the validation after it come first
    if loop.progress.epoch_finished and not t.metric_logger.train.in_step and t.state.stage is not Stage.VALIDATE:
        return epoch + 1, epoch + 1, epoch + 1, epoch
    return epoch + 1, epoch + 1, epoch, epoch


def _fit_evaluation(loop: FitLoop) -> EvaluationLoop | None:
    """The fit's latest validation or sanity check whose counts Lightning still shows (None: none;
    Lightning resets them after the sanity check)."""
    t = loop.trainer
    evaluation = t.state.evaluation
    if evaluation is None or not evaluation.within_fit:
        return None
    if evaluation.stage is Stage.SANITY_CHECK and not t.sanity_checking:
        return None
    return evaluation


def _val_counts(loop: FitLoop) -> list[int | None]:
    """Batches per loader of one validation run (of the sanity check while it runs)."""
    t = loop.trainer
    counts = t.num_val_batches
    if not t.sanity_checking:
        return counts
    steps = t.num_sanity_val_steps
    return [n if steps == -1 or n is None else min(steps, n) for n in counts]


def _val_stages(loop: FitLoop, total: bool) -> _Stages:
    """Lightning's validation batch counters: ``current`` in the latest run (its batches end to
    end over the loaders), ``total`` over the training epoch's runs (`FitValidation.in_epoch`
    counts the finished ones)."""
    evaluation, counts = _fit_evaluation(loop), _val_counts(loop)
    per_run = sum(n or 0 for n in counts)
    running = evaluation is not None and loop.trainer.state.stage in (Stage.VALIDATE, Stage.SANITY_CHECK)
    if evaluation is None:
        current: _Stages = (0, 0, 0, 0)
    elif evaluation.batch_idx is None or not running:  # the run's batches are done
        current = (per_run, per_run, per_run, per_run)
    else:  # inside a batch's hooks: its step ran, its end hook has not returned
        before = sum(n or 0 for n in counts[: evaluation.dataloader_idx]) + evaluation.batch_idx
        current = (before + 1, before + 1, before + 1, before)
    if not total:
        return current
    finished = loop.validation.in_epoch * per_run
    if not running:
        return finished, finished, finished, finished
    ready, started, processed, completed = current
    return finished + ready, finished + started, finished + processed, finished + completed


def _val_is_last(loop: FitLoop) -> bool:
    evaluation = _fit_evaluation(loop)
    if evaluation is None:
        return False
    if evaluation.batch_idx is None:
        return True
    counts = _val_counts(loop)
    return evaluation.dataloader_idx == len(counts) - 1 and evaluation.batch_idx + 1 == counts[-1]
