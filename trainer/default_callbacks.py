"""The one place the trainer imports the `callbacks` package: the default callbacks and loggers.

Callbacks depend on the contracts floor only (`trainer.contracts`); the trainer reaches callbacks
through this module alone, and finds them by the role a callback declares (``Callback.role``),
not by class: a callback of role "checkpoint" is a checkpoint callback everywhere.
"""
from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any, Callable

from callbacks._file_logger import fix_log_versions
from trainer.contracts import storage
from trainer.contracts.ray_worker import ray_train_context
from callbacks.batch_size_finder import BatchSizeFinder, scale_batch_size
from callbacks.lr_finder import LRFinder, lr_find
from callbacks.callback import Callback
from callbacks.logger import Logger
from callbacks.lr_monitor import LearningRateMonitor
from callbacks.model_checkpoint import ModelCheckpoint
from callbacks.model_summary import ModelSummary, RichModelSummary
from callbacks.progress_bar import ProgressBar
from callbacks.rich_progress_bar import RichProgressBar
from callbacks.tqdm_progress_bar import TQDMProgressBar
from trainer.lightning.alias import installed as alias_installed
from callbacks.timer import Timer

if TYPE_CHECKING:
    from trainer.contracts.config import TrainerConfig
    from trainer.contracts.internals import TrainerInternals as Trainer

__all__ = [
    "Callback", "Logger", "ModelCheckpoint", "make_loggers", "make_callbacks", "checkpoint_callbacks",
    "with_module_callbacks", "attach_module_logging", "hook_receivers", "BatchSizeFinder", "LRFinder", "lr_find",
    "scale_batch_size",
]


def make_loggers(config: TrainerConfig) -> list[Logger]:
    """The Trainer's ``logger`` argument as a list (``True``: one TensorBoard logger in
    ``default_root_dir``); none under ``fast_dev_run``, which writes nothing."""
    logger = False if config.debug.fast_dev_run else config.logging.logger
    if logger is True:
        from callbacks.tensorboard_logger import TensorBoardLogger  # imports tensorboard: only when used

        return [TensorBoardLogger(save_dir=config.checkpointing.root)]
    if logger is False or logger is None:
        return []
    items: list[Logger] = []
    for lg in list(logger) if isinstance(logger, (list, tuple)) else [logger]:
        if not isinstance(lg, Logger):
            raise TypeError(f"logger must be True/False, a Logger or a list of Loggers; got {type(lg).__name__}")
        items.append(lg)
    return items


def make_callbacks(config: TrainerConfig, loggers: list[Logger]) -> list[Callback]:
    """The run's callbacks in calling order: loggers, the given and default ones, checkpoints last.

    A default is added only when no callback of its kind (a subclass included) was given.
    ``fast_dev_run`` removes every checkpoint callback: it writes nothing.
    """
    callbacks = config.loop.callbacks
    given: list[Callback] = []
    for cb in [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]:
        if not isinstance(cb, Callback):
            raise TypeError(f"callbacks must be Callback instances; got {type(cb).__name__}")
        given.append(cb)
    roles = {cb.role for cb in given}
    if any(type(cb).__module__.startswith("ray.") for cb in given):
        roles.add("ray_report")  # Ray's own report callback (ray.train.lightning's) reports this run
    as_lightning = alias_installed()
    defaults = _lightning_defaults(config) if as_lightning else _defaults(config, bool(loggers))
    given += [make() for role, make in defaults if role not in roles]
    if config.debug.fast_dev_run:
        given = [cb for cb in given if cb.role != "checkpoint"]
    if as_lightning:  # Lightning's list: the loggers are not callbacks there (`hook_receivers` calls them)
        return _in_calling_order(given)
    return [*loggers, *_in_calling_order(given)]


def hook_receivers(loggers: list[Logger], callbacks: list[Callback]) -> list[Callback]:
    """Whom the hooks are called on: the loggers (first, as Lockstep's list has them) and the callbacks."""
    return [*(lg for lg in loggers if not any(lg is cb for cb in callbacks)), *callbacks]


def _in_calling_order(callbacks: list[Callback]) -> list[Callback]:
    """Checkpoint callbacks after the others, so they save state every other callback already
    updated; a report to Ray after them, so it carries the file they just wrote."""
    ordinary = [cb for cb in callbacks if cb.role not in ("checkpoint", "ray_report")]
    reporters = [cb for cb in callbacks if cb.role == "ray_report"]
    return [*ordinary, *checkpoint_callbacks(callbacks), *reporters]


def _defaults(config: TrainerConfig, logging: bool) -> list[tuple[str, Callable[[], Callback]]]:
    """The default callbacks the config asks for, by role; each is built only if none of its role was given."""
    defaults: list[tuple[str, Callable[[], Callback]]] = []
    if logging:  # learning rates belong in every log
        defaults.append(("lr_monitor", lambda: LearningRateMonitor(to_callback_metrics=False)))
    if config.logging.enable_progress_bar:
        defaults.append(("progress_bar", ProgressBar))
    if config.logging.enable_model_summary:
        defaults.append(("model_summary", ModelSummary))
    max_time = config.limits.max_time
    if max_time is not None:
        defaults.append(("timer", lambda: Timer(max_time, interval="step")))
    if ray_train_context() is not None:  # a Ray Train worker: Ray gets the metrics and checkpoints
        from callbacks.ray_report import RayReportCallback

        defaults.append(("ray_report", RayReportCallback))
    if config.checkpointing.enable_checkpointing and not config.debug.fast_dev_run:
        # a last.ckpt (a link to the newest file: no second write) so that ckpt_path="last" resumes
        save_last = True if storage.is_url(config.checkpointing.root) else "link"
        defaults.append(("checkpoint", lambda: ModelCheckpoint(save_last=save_last)))
    return defaults


def _lightning_defaults(config: TrainerConfig) -> list[tuple[str, Callable[[], Callback]]]:
    """Under ``trainer.as_lightning``: the defaults Lightning adds, in its order (a timer, a rich
    progress bar and model summary where ``rich`` is installed, else the tqdm bar and the plain
    summary, the checkpoint last), and none it does not add (no learning-rate monitor)."""
    rich = importlib.util.find_spec("rich") is not None
    defaults: list[tuple[str, Callable[[], Callback]]] = []
    max_time = config.limits.max_time
    if max_time is not None:
        defaults.append(("timer", lambda: Timer(max_time, interval="step")))
    if config.logging.enable_progress_bar:
        defaults.append(("progress_bar", RichProgressBar if rich else TQDMProgressBar))
    if config.logging.enable_model_summary:
        defaults.append(("model_summary", RichModelSummary if rich else ModelSummary))
    return [*defaults, *(d for d in _defaults(config, False) if d[0] in ("ray_report", "checkpoint"))]


def with_module_callbacks(callbacks: list[Callback], module: Any) -> list[Callback]:
    """The Trainer's callbacks merged with ``module.configure_callbacks()``, as Lightning merges them.

    A module callback replaces the Trainer's callbacks of its type (or a base type of it);
    checkpoint callbacks stay last. The module's hook is called only when overridden.
    """
    from trainer.module import TrainModule

    if type(module).configure_callbacks is TrainModule.configure_callbacks:
        return callbacks
    extra = module.configure_callbacks()
    if not extra:
        return callbacks
    extra = _checked_callbacks(extra)
    replaced = _replaced_kinds(callbacks, extra, type(module).__name__)
    merged = [cb for cb in callbacks if type(cb) not in replaced] + extra
    return _in_calling_order(merged)


def attach_module_logging(callbacks: list[Callback], module: Any) -> None:
    """Give each callback the module's ``log`` and ``log_dict``, as Lightning does at the start of every
    run: a library's callback may log with ``self.log`` in its hooks (anomalib's ``Evaluator``)."""
    for cb in callbacks:
        cb.log = module.log  # type: ignore[attr-defined]
        cb.log_dict = module.log_dict  # type: ignore[attr-defined]


def _checked_callbacks(extra: Any) -> list[Callback]:
    checked: list[Callback] = list(extra) if isinstance(extra, (list, tuple)) else [extra]  # each checked below
    for cb in checked:
        if not isinstance(cb, Callback):
            raise TypeError(f"configure_callbacks must return Callback instances; got {type(cb).__name__}")
    return checked


def _replaced_kinds(callbacks: list[Callback], extra: list[Callback], module_name: str) -> set[type]:
    """The Trainer's callback types a module callback replaces (its own type or a base of it), said once."""
    kinds = {type(cb) for cb in callbacks} - {Callback}
    replaced = {kind for new in extra for kind in kinds if issubclass(type(new), kind)}
    if replaced:
        from trainer.distributed.rank_zero import rank_zero_info

        names = ", ".join(sorted(k.__name__ for k in replaced))
        rank_zero_info(f"[lockstep] {module_name}.configure_callbacks replaces the Trainer's {names}")
    return replaced


def first_log_dir(loggers: list[Logger], default: str) -> str:
    """Where the first logger that has a directory writes, else ``default``."""
    for lg in loggers:
        if lg.log_dir is not None:
            return lg.log_dir
    return default


def checkpoint_callbacks(callbacks: list[Callback]) -> list[ModelCheckpoint]:
    """Every callback of role "checkpoint" (`ModelCheckpoint` and its subclasses) among ``callbacks``, in order."""
    return [cb for cb in callbacks if cb.role == "checkpoint"]  # type: ignore[misc]


def share_log_versions(trainer: Trainer) -> None:
    """Fix the file loggers' shared version before workers are spawned (they inherit it)."""
    fix_log_versions(trainer, trainer.loggers, broadcast=False)
