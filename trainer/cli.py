"""`LightningCLI` (Lightning's class, constructor and hooks) and ``python -m trainer``, its thin wrapper.

The arguments come from the signatures and docstrings of `Trainer`, the module class and the
data class (jsonargparse, extra ``cli``)::

    python -m trainer fit --config run.yaml --model.lr 0.01 --trainer.max_epochs 3
    python -m trainer fit --config run.yaml --print_config > full.yaml

``--model`` and ``--data`` take a class path (``examples.digits.DigitsCNN``) and its
``init_args``; later sources win (defaults < each ``--config`` in order < flags after it). The
resolved configuration is written to ``<trainer.log_dir>/config.yaml`` by global rank 0 when the stage starts
(after every check made before the first step: a refused run writes nothing).
"""
from __future__ import annotations

import difflib
import os
import random
import re
import sys
from types import MethodType
from typing import Any, Callable, Iterable, NoReturn, Optional, Sequence, Union

import torch

from trainer.data.datamodule import DataModule
from trainer.module import TrainModule
from trainer.contracts import storage
from trainer.default_callbacks import Callback
from trainer.seed import seed_everything
from trainer.trainer import Trainer
from trainer.lightning.unsupported import not_provided

SUBCOMMANDS = {
    "fit": "Train the model (and validate it, if there is validation data).",
    "validate": "Run the validation loop once.",
    "test": "Run the test loop once.",
    "predict": "Run the prediction loop and return the predictions.",
}
CONFIG_NAME = "config.yaml"

# Lightning's types of the optimizer and scheduler factories a module's ``__init__`` takes from the CLI
OptimizerCallable = Callable[[Iterable[Any]], torch.optim.Optimizer]
LRSchedulerCallable = Callable[
    [torch.optim.Optimizer], Union[torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau]
]

try:  # the `cli` extra: without it the module imports, and LightningCLI says what to install
    from jsonargparse import ActionConfigFile, ArgumentParser, Namespace
except ImportError:  # pragma: no cover - exercised without the extra
    ArgumentParser = object  # type: ignore[misc,assignment]
    ActionConfigFile = Namespace = None  # type: ignore[misc,assignment]


def __getattr__(name: str) -> Any:
    raise not_provided(__name__, name)  # Lightning's cli helpers Lockstep lacks: named, with the alternative


def _need_jsonargparse() -> None:
    if ActionConfigFile is None:
        raise ImportError("LightningCLI / python -m trainer need jsonargparse: pip install 'lockstep-trainer[cli]'.")
    _build_only_named_classes()


def _build_only_named_classes() -> None:
    """A config builds only classes its arguments' types name (a Trainer argument, the module's,
    the data's, an optimizer's): a class path given to an untyped or ``Any`` argument stays data
    (jsonargparse v5's default; v4 builds any class there, e.g. ``subprocess.Popen``), and import
    paths that run commands or code (``os``, ``subprocess``, ``builtins.eval``...) are refused."""
    from jsonargparse import set_parsing_settings

    try:
        set_parsing_settings(instantiate_subclass_spec_in_any=False)
    except TypeError as err:  # before jsonargparse 4.51 a config could build any class
        raise ImportError(
            "LightningCLI / python -m trainer need jsonargparse >= 4.51 (older releases let a config build "
            "any class): pip install -U 'lockstep-trainer[cli]'."
        ) from err
    try:
        set_parsing_settings(import_path_denylist=[])  # enforce jsonargparse's own denylist
    except TypeError:  # a release without import-path rules: typed arguments still check their base class
        pass


class ReduceLROnPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """torch's ``ReduceLROnPlateau`` with the ``monitor`` it needs in a config (as Lightning's)."""

    def __init__(self, optimizer: torch.optim.Optimizer, monitor: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(optimizer, *args, **kwargs)
        self.monitor = monitor


LR_SCHEDULER_TYPES = (torch.optim.lr_scheduler.LRScheduler, ReduceLROnPlateau)


class LightningArgumentParser(ArgumentParser):
    """jsonargparse's parser with Lightning's helpers for the trainer, module, data, callbacks,
    optimizers and schedulers."""

    def __init__(self, *args: Any, description: str = "Lockstep Trainer command line tool", **kwargs: Any) -> None:
        _need_jsonargparse()
        super().__init__(*args, description=description, **kwargs)
        self.callback_keys: list[str] = []
        self.optimizer_groups: dict[str, tuple[Any, str]] = {}
        self.lr_scheduler_groups: dict[str, tuple[Any, str]] = {}

    def error(self, message: str, ex: Optional[Exception] = None) -> NoReturn:
        """Exit (status 2) with the error line first, naming the closest option to a misspelled one,
        then the ``--help`` that lists the options (jsonargparse prints the ~55-line usage first)."""
        parser = getattr(ex, "subcommand_parser", None) or self
        message += _closest_option(message, parser)
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG", "").lower() == "true":
            super().error(message, ex)  # raises: a nested parser's error goes into its caller's message
        prog = parser.prog.replace(" [options]", "")
        sys.stderr.write(f"{prog}: error: {message}\n")
        if parser.add_help:
            sys.stderr.write(f"`{prog} --help` lists the options.\n")
        self.exit(2)

    def add_lightning_class_args(
        self, lightning_class: Any, nested_key: str, subclass_mode: bool = False, required: bool = True
    ) -> list[str]:
        """Add a Trainer, module, DataModule or callback class's arguments under ``nested_key``."""
        if isinstance(lightning_class, type) and issubclass(lightning_class, Callback):
            self.callback_keys.append(nested_key)
        # jsonargparse (not type-checked here) returns the list of the keys it added
        keys: list[str]
        if subclass_mode:
            keys = self.add_subclass_arguments(lightning_class, nested_key, fail_untyped=False, required=required)
            return keys
        instantiate = not (isinstance(lightning_class, type) and issubclass(lightning_class, Trainer))
        keys = self.add_class_arguments(
            lightning_class, nested_key, fail_untyped=False, instantiate=instantiate, sub_configs=True
        )
        return keys

    def add_optimizer_args(
        self, optimizer_class: Any = (torch.optim.Optimizer,), nested_key: str = "optimizer", link_to: str = "AUTOMATIC"
    ) -> None:
        """An optimizer group (its class, or any subclass of a tuple's), built later with the parameters."""
        self._add_optimization_group(optimizer_class, nested_key, "params")
        self.optimizer_groups[nested_key] = (optimizer_class, link_to)

    def add_lr_scheduler_args(
        self, lr_scheduler_class: Any = LR_SCHEDULER_TYPES, nested_key: str = "lr_scheduler", link_to: str = "AUTOMATIC"
    ) -> None:
        """A scheduler group, built later with the optimizer."""
        self._add_optimization_group(lr_scheduler_class, nested_key, "optimizer")
        self.lr_scheduler_groups[nested_key] = (lr_scheduler_class, link_to)

    def _add_optimization_group(self, classes: Any, nested_key: str, first: str) -> None:
        kwargs: dict[str, Any] = {"instantiate": False, "fail_untyped": False, "skip": {first}}
        if isinstance(classes, tuple):
            self.add_subclass_arguments(classes, nested_key, **kwargs)
        else:
            self.add_class_arguments(classes, nested_key, sub_configs=True, **kwargs)


_UNKNOWN_OPTION = re.compile(
    r"unrecognized arguments: (?:[^-\s]\S* )*(-[^\s=]+)|does not accept option '([^']+)'|Option '([^']+)' is not accepted"
)


def _closest_option(message: str, parser: Any) -> str:
    """`` (did you mean `--trainer.max_epochs`?)`` when ``message`` names an unknown option, else ""."""
    found = _UNKNOWN_OPTION.search(message)
    if found is None or "did you mean" in message:  # a nested parser's message has it already
        return ""
    name = next(group for group in found.groups() if group)
    options = [option for option in parser._option_string_actions if option.startswith("--")]
    if not name.startswith("-"):  # a config key: trainer.max_epochs
        options = [option[2:] for option in options]
    close = difflib.get_close_matches(name, options, n=1)
    return f" (did you mean `{close[0]}`?)" if close else ""


class SaveConfigCallback(Callback):
    """Writes the run's resolved configuration to ``<trainer.log_dir>/<config_filename>`` (global rank 0).

    Args:
        parser: The parser that parsed ``config``.
        config: The parsed configuration.
        config_filename: The file's name.
        overwrite: Replace an existing file (otherwise the run stops rather than overwrite one).
        multifile: Accepted for Lightning's signature; the configuration is saved as one file.
        save_to_log_dir: Write the file (``False``: only `save_config`, for subclasses).
    """

    def __init__(
        self,
        parser: LightningArgumentParser,
        config: Any,
        config_filename: str = CONFIG_NAME,
        overwrite: bool = False,
        multifile: bool = False,
        save_to_log_dir: bool = True,
    ) -> None:
        self.parser, self.config, self.config_filename = parser, config, config_filename
        self.overwrite, self.multifile, self.save_to_log_dir = overwrite, multifile, save_to_log_dir
        self.already_saved = False

    # The file is written when the stage starts (Lightning: in ``setup``): after every check a run
    # makes before its first step, so a refused run (a `GlobalBatchError`, a checkpoint that does not
    # fit) writes nothing, and its empty log version goes again. The loggers' version is fixed by then.
    # The CLI's callback runs on the Trainer and the TrainModule only, which `save_config` takes (as Lightning's).
    def on_fit_start(self, trainer: Trainer, pl_module: TrainModule) -> None:  # type: ignore[override]
        self._save(trainer, pl_module, "fit")

    def on_validation_start(self, trainer: Trainer, pl_module: TrainModule) -> None:  # type: ignore[override]
        self._save(trainer, pl_module, "validate")

    def on_test_start(self, trainer: Trainer, pl_module: TrainModule) -> None:  # type: ignore[override]
        self._save(trainer, pl_module, "test")

    def on_predict_start(self, trainer: Trainer, pl_module: TrainModule) -> None:  # type: ignore[override]
        self._save(trainer, pl_module, "predict")

    def _save(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        if self.already_saved:
            return
        if self.save_to_log_dir:
            path = storage.join(trainer.log_dir, self.config_filename)
            exists = trainer.is_global_zero and not self.overwrite and storage.exists(path)
            if trainer.world_size > 1:
                exists = trainer.strategy.broadcast(exists, src=0)
            if exists:
                raise RuntimeError(
                    f"SaveConfigCallback: {path} exists; not overwriting a previous run's configuration. Delete "
                    "it, or pass LightningCLI(save_config_kwargs={'overwrite': True}), or save_config_callback=None."
                )
            if trainer.is_global_zero:
                text = self.parser.dump(self.config, skip_none=False)
                storage.write_bytes(path, text.encode("utf-8"))
        if trainer.is_global_zero:
            self.save_config(trainer, module, stage)
        self.already_saved = True

    def save_config(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        """Override to save the configuration somewhere else too (global rank 0 only)."""


class LightningCLI:
    """Lightning's ``LightningCLI``: a command line (or, with ``run=False``, a parsed configuration)
    for a module, a DataModule and the Trainer.

    Args:
        model_class: The module class (``None``: any `TrainModule`, chosen with ``--model``).
        datamodule_class: The DataModule class (``None``: any, optional).
        save_config_callback: The callback class that saves the configuration (``None``: none).
        save_config_kwargs: Its keyword arguments (``{"overwrite": True}``, ``config_filename``).
        trainer_class: The Trainer class.
        trainer_defaults: Defaults of the Trainer's arguments (``callbacks`` are added to the given ones).
        seed_everything_default: ``--seed_everything``'s default: an int, ``True`` (a random seed) or ``False``.
        parser_kwargs: Keyword arguments of the parser (per subcommand: ``{"fit": {...}}``).
        parser_class: The parser class.
        subclass_mode_model: Accept any subclass of ``model_class`` (``--model.class_path``).
        subclass_mode_data: Accept any subclass of ``datamodule_class``.
        args: Arguments to parse instead of ``sys.argv[1:]`` (a list, or a dict / Namespace config).
        run: Run the subcommand (``fit``, ``validate``, ``test``, ``predict``); ``False``: no
            subcommand, only ``cli.trainer``, ``cli.model``, ``cli.datamodule``.
        auto_configure_optimizers: Add ``--optimizer`` / ``--lr_scheduler``; when given they
            replace the module's ``configure_optimizers``.
        load_from_checkpoint_support: Accepted for Lightning's signature (the hyperparameters of
            ``--ckpt_path`` are not read into the configuration).
    """

    def __init__(
        self,
        model_class: Optional[Union[type[TrainModule], Callable[..., TrainModule]]] = None,
        datamodule_class: Optional[Union[type[DataModule], Callable[..., DataModule]]] = None,
        save_config_callback: Optional[type[SaveConfigCallback]] = SaveConfigCallback,
        save_config_kwargs: Optional[dict[str, Any]] = None,
        trainer_class: Union[type[Trainer], Callable[..., Trainer]] = Trainer,
        trainer_defaults: Optional[dict[str, Any]] = None,
        seed_everything_default: Union[bool, int] = True,
        parser_kwargs: Optional[dict[str, Any]] = None,
        parser_class: type[LightningArgumentParser] = LightningArgumentParser,
        subclass_mode_model: bool = False,
        subclass_mode_data: bool = False,
        args: Any = None,
        run: bool = True,
        auto_configure_optimizers: bool = True,
        load_from_checkpoint_support: bool = True,
    ) -> None:
        _need_jsonargparse()
        self.save_config_callback = save_config_callback
        self.save_config_kwargs = save_config_kwargs or {}
        self.trainer_class = trainer_class
        self.trainer_defaults = trainer_defaults or {}
        self.seed_everything_default = seed_everything_default
        self.parser_kwargs = parser_kwargs or {}
        self.parser_class = parser_class
        self.auto_configure_optimizers = auto_configure_optimizers
        self.model_class = model_class
        self._model_class = model_class or TrainModule
        self.subclass_mode_model = model_class is None or subclass_mode_model
        self.datamodule_class = datamodule_class
        self._datamodule_class = datamodule_class or DataModule
        self.subclass_mode_data = datamodule_class is None or subclass_mode_data

        main_kwargs = {k: v for k, v in self.parser_kwargs.items() if k not in self.subcommands()}
        sub_kwargs = {k: v for k, v in self.parser_kwargs.items() if k in self.subcommands()}
        self.setup_parser(run, main_kwargs, sub_kwargs)
        self.parse_arguments(self.parser, args)
        self.subcommand: Optional[str] = self.config["subcommand"] if run else None
        self._set_seed()
        self.before_instantiate_classes()
        self.instantiate_classes()
        self.after_instantiate_classes()
        if self.subcommand is not None:
            self._run_subcommand(self.subcommand)

    # -- the parser ---------------------------------------------------------------------------
    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """The parser, with ``-c/--config``."""
        kwargs.setdefault("allow_abbrev", False)
        parser = self.parser_class(**kwargs)
        parser.add_argument("-c", "--config", action=ActionConfigFile, help="A YAML file of arguments (may be repeated).")
        return parser

    def setup_parser(self, add_subcommands: bool, main_kwargs: dict[str, Any], subparser_kwargs: dict[str, Any]) -> None:
        """The parser and, with ``add_subcommands``, one sub-parser per subcommand."""
        self.parser = self.init_parser(**main_kwargs)
        if add_subcommands:
            self._subcommand_parsers: dict[str, LightningArgumentParser] = {}
            self._subcommand_method_arguments: dict[str, list[str]] = {}
            subcommands = self.parser.add_subcommands()
            for name in self.subcommands():
                kwargs = dict(subparser_kwargs.get(name, {}))
                kwargs.setdefault("description", SUBCOMMANDS[name])
                sub = self.init_parser(**kwargs)
                self._add_arguments(sub)
                added = sub.add_method_arguments(self.trainer_class, name, skip=set(self.subcommands()[name]))
                self._subcommand_method_arguments[name] = list(added)
                self._subcommand_parsers[name] = sub
                subcommands.add_subcommand(name, sub, help=SUBCOMMANDS[name])
        else:
            self._add_arguments(self.parser)

    def add_default_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """``--seed_everything``."""
        parser.add_argument(
            "--seed_everything", type=Union[bool, int], default=self.seed_everything_default,
            help="seed_everything(value) before the classes are built (true: a random seed; false: none).",
        )

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """The ``trainer``, ``model`` and ``data`` groups."""
        parser.add_lightning_class_args(self.trainer_class, "trainer")
        parser.set_defaults({f"trainer.{k}": v for k, v in self.trainer_defaults.items() if k != "callbacks"})
        parser.add_lightning_class_args(self._model_class, "model", subclass_mode=self.subclass_mode_model)
        parser.add_lightning_class_args(
            self._datamodule_class, "data", subclass_mode=self.subclass_mode_data,
            required=self.datamodule_class is not None,
        )

    def _add_arguments(self, parser: LightningArgumentParser) -> None:
        self.add_default_arguments_to_parser(parser)
        self.add_core_arguments_to_parser(parser)
        self.add_arguments_to_parser(parser)
        if self.auto_configure_optimizers:
            if not parser.optimizer_groups:
                parser.add_optimizer_args()
            if not parser.lr_scheduler_groups:
                parser.add_lr_scheduler_args()
        for key, (_, link_to) in {**parser.optimizer_groups, **parser.lr_scheduler_groups}.items():
            if link_to != "AUTOMATIC":
                parser.link_arguments(key, link_to)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Override to add arguments or links (``parser.link_arguments("data.num_classes", "model.num_classes")``)."""

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """The subcommands and the Trainer method arguments that are not options."""
        return {
            "fit": {"model", "train_dataloaders", "val_dataloaders", "datamodule"},
            "validate": {"model", "dataloaders", "datamodule"},
            "test": {"model", "dataloaders", "datamodule"},
            "predict": {"model", "dataloaders", "datamodule"},
        }

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse ``args`` (default ``sys.argv[1:]``) into ``self.config``."""
        if isinstance(args, (dict, Namespace)):
            self.config = parser.parse_object(args)
        else:
            self.config = parser.parse_args(args)

    # -- the objects --------------------------------------------------------------------------
    def before_instantiate_classes(self) -> None:
        """Override to run code before the classes are built."""

    def instantiate_classes(self) -> None:
        """Build the module, the DataModule and the Trainer (``cli.model``, ``cli.datamodule``, ``cli.trainer``)."""
        self.config_init = self.parser.instantiate_classes(self.config)
        self.datamodule = self._get(self.config_init, "data")
        self.model = self._get(self.config_init, "model")
        self._add_configure_optimizers_method_to_model(self.subcommand)
        self.trainer = self.instantiate_trainer()

    def after_instantiate_classes(self) -> None:
        """Override to run code after the classes are built."""

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer from its group, ``trainer_defaults``' callbacks, callback groups and the config saver."""
        parser = self._parser(self.subcommand)
        config = {**dict(vars(self._get(self.config_init, "trainer", default=Namespace()))), **kwargs}
        given = config.get("callbacks")
        callbacks = [] if given is None else list(given) if isinstance(given, (list, tuple)) else [given]
        callbacks += [self._get(self.config_init, key) for key in parser.callback_keys]
        default = self.trainer_defaults.get("callbacks")
        if default is not None:
            callbacks += list(default) if isinstance(default, (list, tuple)) else [default]
        if self.save_config_callback is not None and not config.get("fast_dev_run", False):
            saved = self.config.get(str(self.subcommand), self.config)
            callbacks.append(self.save_config_callback(parser, saved, **self.save_config_kwargs))
        config["callbacks"] = callbacks
        return self.trainer_class(**config)

    @staticmethod
    def configure_optimizers(module: TrainModule, optimizer: torch.optim.Optimizer, lr_scheduler: Any = None) -> Any:
        """What the module's ``configure_optimizers`` returns when ``--optimizer`` is given."""
        if lr_scheduler is None:
            return optimizer
        if isinstance(lr_scheduler, ReduceLROnPlateau):
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": lr_scheduler, "monitor": lr_scheduler.monitor}}
        return [optimizer], [lr_scheduler]

    def _add_configure_optimizers_method_to_model(self, subcommand: Optional[str]) -> None:
        if not self.auto_configure_optimizers:
            return
        parser = self._parser(subcommand)
        optimizers = [k for k, (_, link) in parser.optimizer_groups.items() if link == "AUTOMATIC"]
        schedulers = [k for k, (_, link) in parser.lr_scheduler_groups.items() if link == "AUTOMATIC"]
        if len(optimizers) > 1 or len(schedulers) > 1:
            raise ValueError(
                f"LightningCLI can configure one optimizer and one scheduler automatically, found {optimizers + schedulers}: "
                "link the groups to the module and write its configure_optimizers."
            )
        optimizer_init = self._get(self.config_init, optimizers[0]) if optimizers else None
        if not optimizer_init:
            return
        scheduler_init = self._get(self.config_init, schedulers[0]) if schedulers else None
        model = self.model

        def configure_optimizers(module: TrainModule) -> Any:
            optimizer = _instantiate(optimizer_init, module.parameters())
            scheduler = _instantiate(scheduler_init, optimizer) if scheduler_init else None
            return self.configure_optimizers(module, optimizer, scheduler)

        model.configure_optimizers = MethodType(configure_optimizers, model)

    # -- running ------------------------------------------------------------------------------
    def _parser(self, subcommand: Optional[str]) -> LightningArgumentParser:
        return self.parser if subcommand is None else self._subcommand_parsers[subcommand]

    def _get(self, config: Any, key: str, default: Any = None) -> Any:
        return config.get(str(self.subcommand), config).get(key, default)

    def _run_subcommand(self, subcommand: str) -> None:
        before = getattr(self, f"before_{subcommand}", None)
        if callable(before):
            before()
        fn = getattr(self, subcommand, getattr(self.trainer, subcommand))
        kwargs = {
            k: v for k, v in self.config_init[subcommand].items() if k in self._subcommand_method_arguments[subcommand]
        }
        kwargs["model"] = self.model
        if self.datamodule is not None:
            kwargs["datamodule"] = self.datamodule
        fn(**kwargs)
        after = getattr(self, f"after_{subcommand}", None)
        if callable(after):
            after()

    def _set_seed(self) -> None:
        seed = self._get(self.config, "seed_everything")
        if seed is False or seed is None:
            return
        seed = seed_everything(random.randint(0, 2**31 - 1) if seed is True else seed, workers=True)
        target = self.config[self.subcommand] if self.subcommand else self.config
        target["seed_everything"] = seed


def _instantiate(init: Any, first: Any) -> Any:
    """A ``class_path`` / ``init_args`` config built with ``first`` as its first argument."""
    import importlib

    init = dict(vars(init)) if Namespace is not None and isinstance(init, Namespace) else dict(init)
    module_name, _, name = init["class_path"].rpartition(".")
    cls = getattr(importlib.import_module(module_name), name)
    args = init.get("init_args") or {}
    return cls(first, **(dict(vars(args)) if Namespace is not None and isinstance(args, Namespace) else dict(args)))


def cli_lightning_logo() -> None:
    """Lightning's banner function, here one line naming the framework."""
    print("Lockstep")


def main(argv: Sequence[str] | None = None) -> Any:
    """``python -m trainer``: `LightningCLI` over any `TrainModule` and `DataModule`, seeded with 0."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in SUBCOMMANDS:
        usage = "usage: python -m trainer {" + ",".join(SUBCOMMANDS) + "} [--config FILE] [--help] ...\n"
        usage += "".join(f"  {name:9s} {text}\n" for name, text in SUBCOMMANDS.items())
        if args and args[0] in ("-h", "--help"):
            print(usage, end="")
            return None
        error = f"unknown subcommand {args[0]!r}" if args else "a subcommand is needed"
        close = difflib.get_close_matches(args[0], list(SUBCOMMANDS), n=1) if args else []
        hint = f" (did you mean `{close[0]}`?)" if close else ""
        sys.stderr.write(f"python -m trainer: error: {error}{hint}\n{usage}")
        raise SystemExit(2)
    _need_jsonargparse()
    from trainer.checkpointing.checkpoint_paths import CheckpointPathError

    try:
        return _MainCLI(
            seed_everything_default=0, args=args, parser_kwargs={"prog": "python -m trainer"},
            save_config_kwargs={"overwrite": True},
        )
    except (CheckpointPathError, _TrainerArgumentError) as err:
        # a bad --ckpt_path or Trainer argument is a usage error, like a bad option: one line and exit code 2
        sys.stderr.write(f"python -m trainer {args[0]}: error: {err}\n")
        raise SystemExit(2) from None


class _TrainerArgumentError(Exception):
    """The Trainer refused its arguments (``--trainer.global_batch_size 0``): a usage error."""


class _MainCLI(LightningCLI):
    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        # the parser checks types only; the Trainer checks values (an int >= 1), before any work
        try:
            return super().instantiate_trainer(**kwargs)
        except (TypeError, ValueError, NotImplementedError) as err:  # NotImplementedError: a refused Lightning argument
            raise _TrainerArgumentError(f"{type(err).__name__}: {err}") from err
