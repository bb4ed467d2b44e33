"""`TrainerConfig`: every `Trainer` argument, in the frozen section it belongs to.

Each section checks its own arguments when it is built (a wrong type is a `TypeError`, a bad
value a `ValueError`, both naming the argument: ``docs/trainer.md``), and resolves the defaults
that depend only on its own fields (``max_epochs``, ``default_root_dir``, ``max_time``). The
debugging switches that rewrite other sections (``fast_dev_run``, ``overfit_batches``) are
applied once, by `TrainerConfig.resolved`. What changes during a run (``should_stop``, the current
``accumulate_grad_batches``, optimizers, loaders) stays on the Trainer.

The objects an argument may be (a `Strategy`, a `Profiler`, callbacks, loggers) are checked by
the code that builds from them, above this floor: the strategy selection, `make_profiler`,
`make_callbacks`, `make_loggers`; as are the names ``accelerator`` and ``precision``, which those
parse.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
from typing import Sequence, Union

from trainer.contracts import storage
from trainer.contracts.arguments import check_bool, check_int, check_limit, check_number, check_path, check_str
from trainer.contracts.duration import parse_duration
from trainer.contracts.protocols import CallbackView, LoggerView, StrategyView

STRATEGY_NAMES = (
    "auto",
    "single_device",
    "ddp",
    "ddp_spawn",
    "allreduce",
    "fsdp",
    # Lightning's names for DDP with DDP's own find_unused_parameters (a ported project keeps them)
    "ddp_find_unused_parameters_true",
    "ddp_find_unused_parameters_false",
)

Limit = Union[int, float, None]
CallbacksArgument = Union[Sequence[CallbackView], CallbackView, None]
LoggerArgument = Union[bool, LoggerView, Sequence[LoggerView], None]


def _set(section: object, name: str, value: object) -> None:
    object.__setattr__(section, name, value)  # a frozen section resolving its own field, once


@dataclasses.dataclass(frozen=True)
class Limits:
    """How long a run lasts, and how many batches of each loader it draws."""

    max_epochs: int | None = None  # resolved: 1000 (Lightning's default), or -1 when max_time is the limit
    max_steps: int = -1
    min_epochs: int | None = None  # should_stop (early stopping) waits for these, as in Lightning
    min_steps: int | None = None
    max_time: str | datetime.timedelta | dict[str, int] | None = None  # a timedelta once built
    limit_train_batches: Limit = None
    limit_val_batches: Limit = None
    limit_test_batches: Limit = None
    limit_predict_batches: Limit = None

    def __post_init__(self) -> None:
        check_int("max_steps", self.max_steps, minimum=-1)
        # None is the default of these, not a value to offer: the message names only the ints
        if self.max_epochs is not None:
            check_int("max_epochs", self.max_epochs, minimum=-1)
        for name in ("min_epochs", "min_steps"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), minimum=0)
        for name in ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches"):
            check_limit(name, getattr(self, name))
        _set(self, "max_time", parse_duration("max_time", self.max_time))
        if self.max_epochs is None and self.max_steps == -1:
            # Lightning's default when no limit is given; with max_time the time is the limit
            _set(self, "max_epochs", 1000 if self.max_time is None else -1)


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """How the loops step: accumulation, clipping, validation cadence, and the callbacks given."""

    accumulate_grad_batches: int = 1  # at the start; the run's value may change between epochs
    global_batch_size: int | None = None  # G fixed on every world size: A = G / (W * b) (trainer/contracts/accumulation.py)
    gradient_clip_val: float | None = None
    gradient_clip_algorithm: str = "norm"
    scale_lr: bool | str = False
    val_check_interval: int | float = 1.0
    check_val_every_n_epoch: int | None = 1
    num_sanity_val_steps: int = 2
    reload_dataloaders_every_n_epochs: int = 0
    inference_mode: bool = True  # evaluation under torch.inference_mode (else no_grad), as Lightning chooses
    compile: bool = False  # torch.compile the module (in place) before the strategy wraps it
    channels_last: bool = False  # module and 4-D batches in torch.channels_last
    pin_memory: bool = True  # CUDA: pin train/val loaders that do not pin yet
    callbacks: CallbacksArgument = None

    def __post_init__(self) -> None:
        check_int("accumulate_grad_batches", self.accumulate_grad_batches, minimum=1)
        check_int("global_batch_size", self.global_batch_size, minimum=1, allow_none=True)
        check_int("num_sanity_val_steps", self.num_sanity_val_steps, minimum=-1)
        if self.check_val_every_n_epoch is not None:
            check_int("check_val_every_n_epoch", self.check_val_every_n_epoch, minimum=1)
        _check_val_check_interval(self.val_check_interval)
        if self.check_val_every_n_epoch is None and isinstance(self.val_check_interval, float):
            raise ValueError(
                f"val_check_interval={self.val_check_interval} is a fraction of an epoch, but "
                "check_val_every_n_epoch=None counts training batches over epochs: give an int number "
                "of batches (as Lightning requires)."
            )
        # a NaN clip value turns every gradient into NaN at the first step
        _set(self, "gradient_clip_val", check_number("gradient_clip_val", self.gradient_clip_val, minimum=0, allow_none=True))
        check_str("gradient_clip_algorithm", self.gradient_clip_algorithm)
        if self.gradient_clip_algorithm not in ("norm", "value"):
            raise ValueError(f"gradient_clip_algorithm must be 'norm' or 'value', got {self.gradient_clip_algorithm!r}")
        _check_scale_lr(self.scale_lr)
        for name in ("inference_mode", "compile", "channels_last", "pin_memory"):
            check_bool(name, getattr(self, name))
        check_int("reload_dataloaders_every_n_epochs", self.reload_dataloaders_every_n_epochs, minimum=0)


@dataclasses.dataclass(frozen=True)
class PrecisionConfig:
    """The numerics: the precision's name (parsed by `normalize_precision`) and the cuDNN flags."""

    precision: str | int = "32-true"
    deterministic: bool | str = False
    benchmark: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.deterministic, (bool, str)):
            raise TypeError(f"deterministic must be True, False or 'warn', got {self.deterministic!r}")
        if self.deterministic not in (True, False, "warn"):
            raise ValueError(f"deterministic must be True, False or 'warn', got {self.deterministic!r}")
        if self.benchmark is not None:
            check_bool("benchmark", self.benchmark)


@dataclasses.dataclass(frozen=True)
class CheckpointingConfig:
    """Where the run writes, whether a checkpoint callback is added, what a resume may change."""

    enable_checkpointing: bool = True
    default_root_dir: str | os.PathLike[str] | None = None  # normalized when built: a str, a local path or a URL
    allow_global_batch_change: bool = False  # a resume may continue with another global batch (warned)
    allow_dataset_change: bool = False  # a resume mid-epoch over another dataset length restarts that epoch (warned)
    model_registry: str | None = None  # refused unless None (`REFUSED_TRAINER_ARGUMENTS`)

    @property
    def root(self) -> str:
        """``default_root_dir`` as built: a local path or a URL."""
        return str(self.default_root_dir)

    def __post_init__(self) -> None:
        for name in ("enable_checkpointing", "allow_global_batch_change", "allow_dataset_change"):
            check_bool(name, getattr(self, name))
        check_path("default_root_dir", self.default_root_dir)
        _set(self, "default_root_dir", storage.normalize(self.default_root_dir or os.getcwd(), "default_root_dir"))


@dataclasses.dataclass(frozen=True)
class LoggingConfig:
    """The loggers, the progress bar, the summary, the profiler (a name or a `Profiler`)."""

    logger: LoggerArgument = True
    log_every_n_steps: int = 50
    enable_progress_bar: bool = True
    enable_model_summary: bool = True
    enable_autolog_hparams: bool = True  # the hyperparameters go to the loggers at the start of a fit
    profiler: object = None  # as given (None, "simple", "advanced", "pytorch" or a Profiler): `make_profiler` checks and builds it

    def __post_init__(self) -> None:
        check_int("log_every_n_steps", self.log_every_n_steps, minimum=1)
        for name in ("enable_progress_bar", "enable_model_summary", "enable_autolog_hparams"):
            check_bool(name, getattr(self, name))


@dataclasses.dataclass(frozen=True)
class DebugConfig:
    """Short runs and the non-finite / anomaly checks."""

    fast_dev_run: int = 0  # batches per loader (0: off; True is 1)
    overfit_batches: int | float = 0.0
    detect_non_finite_loss: bool = True
    detect_non_finite_grads: bool = False
    detect_anomaly: bool = False  # the fit loop under torch.autograd.set_detect_anomaly
    barebones: bool = False  # refused unless False (`REFUSED_TRAINER_ARGUMENTS`)

    def __post_init__(self) -> None:
        for name in ("detect_non_finite_loss", "detect_non_finite_grads", "detect_anomaly"):
            check_bool(name, getattr(self, name))
        _set(self, "fast_dev_run", _fast_dev_batches(self.fast_dev_run))
        check_limit("overfit_batches", self.overfit_batches)
        if self.overfit_batches is None:
            raise TypeError("overfit_batches must be an int (batches) or a float fraction in [0, 1], got None")


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """Processes and devices: the names the strategy selection turns into a `Strategy`."""

    accelerator: object = "auto"  # a name, or an accelerator object (made its name)
    devices: int | str = "auto"  # parsed: "auto" or a process count per node
    num_nodes: int = 1
    strategy: str | StrategyView = "auto"
    sync_batchnorm: bool = False
    use_distributed_sampler: bool = True
    # refused unless None (`REFUSED_TRAINER_ARGUMENTS`), but for a checkpoint I/O and one Lightning cluster environment
    plugins: object = None

    def __post_init__(self) -> None:
        for name in ("sync_batchnorm", "use_distributed_sampler"):
            check_bool(name, getattr(self, name))
        _set(self, "devices", parse_devices(self.devices))
        check_int("num_nodes", self.num_nodes, minimum=1)
        if isinstance(self.strategy, str) and self.strategy not in STRATEGY_NAMES:
            raise ValueError(
                f"Unknown strategy {self.strategy!r}. Use one of {', '.join(map(repr, STRATEGY_NAMES))} or a Strategy."
            )
        flag = getattr(self.accelerator, "lockstep_flag", None)
        if callable(flag):  # an accelerator object (Lightning's CPUAccelerator(), trainer.lightning.accelerators)
            _set(self, "accelerator", flag())
        requested = getattr(self.strategy, "requested_accelerator", None)  # DDPStrategy(accelerator="gpu")
        if requested is not None:
            if self.accelerator != "auto":
                raise ValueError(
                    f"The accelerator is set twice: {type(self.strategy).__name__}(accelerator={requested!r}) and "
                    f"Trainer(accelerator={self.accelerator!r}); choose one (as Lightning refuses both)."
                )
            _set(self, "accelerator", requested)


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """The Trainer's arguments, by section (docs/trainer.md describes each argument)."""

    limits: Limits = dataclasses.field(default_factory=Limits)
    loop: LoopConfig = dataclasses.field(default_factory=LoopConfig)
    precision: PrecisionConfig = dataclasses.field(default_factory=PrecisionConfig)
    checkpointing: CheckpointingConfig = dataclasses.field(default_factory=CheckpointingConfig)
    logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)
    debug: DebugConfig = dataclasses.field(default_factory=DebugConfig)
    distributed: DistributedConfig = dataclasses.field(default_factory=DistributedConfig)

    def resolved(self) -> TrainerConfig:
        """This config with ``fast_dev_run`` / ``overfit_batches`` applied to the limits and the loop."""
        n = self.debug.fast_dev_run
        if n:
            limits = dataclasses.replace(
                self.limits, limit_train_batches=n, limit_val_batches=n, limit_test_batches=n,
                limit_predict_batches=n, max_steps=n, max_epochs=1,
            )
            loop = dataclasses.replace(self.loop, num_sanity_val_steps=0, val_check_interval=1.0, check_val_every_n_epoch=1)
            return dataclasses.replace(self, limits=limits, loop=loop)
        if self.debug.overfit_batches:
            # the same first batches every epoch, and as many validation batches (as in Lightning 2.x)
            m = self.debug.overfit_batches
            return dataclasses.replace(self, limits=dataclasses.replace(self.limits, limit_train_batches=m, limit_val_batches=m))
        return self


def parse_devices(devices: object) -> int | str:
    """``"auto"`` or a positive process count per node."""
    if isinstance(devices, bool) or not isinstance(devices, (int, str)):
        raise TypeError(f"devices must be 'auto' or an int >= 1 (processes per node), got {devices!r}")
    if devices == "auto":
        return "auto"
    if isinstance(devices, str) and devices.isdigit():
        devices = int(devices)
    if not isinstance(devices, int) or devices < 1:
        raise ValueError(f"devices must be 'auto' or an int >= 1 (processes per node), got {devices!r}")
    return devices


def _fast_dev_batches(value: object) -> int:
    if not isinstance(value, (bool, int)):
        raise TypeError(f"fast_dev_run must be a bool or an int number of batches, got {value!r}")
    if not isinstance(value, bool) and value < 0:
        raise ValueError(f"fast_dev_run must be >= 0 (or a bool), got {value}")
    return 1 if value is True else int(value)


def _check_val_check_interval(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"val_check_interval must be an int (batches) or a float fraction, got {value!r}")
    if isinstance(value, int) and value < 1:
        raise ValueError(f"val_check_interval as an int must be >= 1, got {value}")
    if isinstance(value, float) and not 0.0 < value <= 1.0:
        raise ValueError(f"val_check_interval as a fraction must be in (0.0, 1.0], got {value}")


def _check_scale_lr(value: object) -> None:
    if value is not None and not isinstance(value, (bool, str)):
        raise TypeError(f"scale_lr must be False, True, 'linear' or 'sqrt'; got {value!r}.")
    if value not in (None, False, True, "linear", "sqrt"):
        raise ValueError(f"scale_lr must be False, True, 'linear' or 'sqrt'; got {value!r}.")
