"""``python -m trainer fit|validate|test|predict``: a run from YAML configs and command-line flags.

The arguments come from the signatures and docstrings of `Trainer`, the module class and the
data class (jsonargparse, extra ``cli``)::

    python -m trainer fit --config run.yaml --model.lr 0.01 --trainer.max_epochs 3
    python -m trainer fit --config run.yaml --print_config > full.yaml

``--model`` and ``--data`` take a class path (``examples.digits.DigitsCNN``) and its
``init_args``; later sources win (defaults < each ``--config`` in order < flags after it). The
resolved configuration is written to ``<trainer.log_dir>/config.yaml`` by global rank 0.
"""
from __future__ import annotations

import sys
from typing import Any, Optional, Sequence

from trainer.data.datamodule import DataModule
from trainer.module import TrainModule
from trainer.contracts import storage
from trainer.default_callbacks import Callback
from trainer.seed import seed_everything
from trainer.trainer import Trainer

SUBCOMMANDS = {
    "fit": "Train the model (and validate it, if there is validation data).",
    "validate": "Run the validation loop once.",
    "test": "Run the test loop once.",
    "predict": "Run the prediction loop and return the predictions.",
}
CONFIG_NAME = "config.yaml"


class SaveConfig(Callback):
    """Writes the run's resolved configuration to ``<trainer.log_dir>/config.yaml`` (global rank 0)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def setup(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        # after the loggers' setup (they come first): the log directory's version is fixed
        if trainer.is_global_zero:
            storage.write_bytes(storage.join(trainer.log_dir, CONFIG_NAME), self.text.encode("utf-8"))


def build_parser(subcommand: str) -> Any:
    """The jsonargparse parser of one subcommand (``--config``, ``--print_config``, the groups)."""
    try:
        from jsonargparse import ActionConfigFile, ArgumentParser
    except ImportError:
        raise ImportError("python -m trainer needs jsonargparse: pip install 'lockstep-trainer[cli]'.") from None
    parser = ArgumentParser(
        prog=f"python -m trainer {subcommand}", description=SUBCOMMANDS[subcommand], allow_abbrev=False
    )
    parser.add_argument("--config", action=ActionConfigFile, help="A YAML file of arguments (may be repeated).")
    parser.add_argument(
        "--seed_everything", type=Optional[int], default=0,
        help="seed_everything(value) before the model is built (null: no seeding).",
    )
    parser.add_class_arguments(Trainer, "trainer", instantiate=False, fail_untyped=False)
    parser.add_subclass_arguments(TrainModule, "model", required=True, help="The TrainModule: class_path and init_args.")
    parser.add_subclass_arguments(DataModule, "data", required=False, help="A DataModule: class_path and init_args.")
    parser.add_argument(
        "--ckpt_path", type=Optional[str], default=None,
        help="'last', 'best' or a checkpoint path/URL: resume (fit) or load the weights (the others).",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> Any:
    """Parse ``argv`` (default: ``sys.argv[1:]``), build the Trainer, module and data, run the subcommand."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in SUBCOMMANDS:
        usage = "usage: python -m trainer {" + ",".join(SUBCOMMANDS) + "} [--config FILE] [--help] ...\n"
        usage += "".join(f"  {name:9s} {text}\n" for name, text in SUBCOMMANDS.items())
        if args and args[0] in ("-h", "--help"):
            print(usage, end="")
            return None
        sys.stderr.write(usage + (f"error: unknown subcommand {args[0]!r}\n" if args else "error: a subcommand is needed\n"))
        raise SystemExit(2)
    subcommand = args[0]
    parser = build_parser(subcommand)
    config = parser.parse_args(args[1:])
    if config.seed_everything is not None:
        seed_everything(config.seed_everything)  # before the model's weights are drawn
    objects = parser.instantiate_classes(config)
    trainer_kwargs = dict(vars(objects.trainer))
    given = trainer_kwargs.pop("callbacks", None)
    callbacks = list(given) if isinstance(given, (list, tuple)) else [] if given is None else [given]
    saved = parser.dump(config, skip_none=False)
    trainer = Trainer(**trainer_kwargs, callbacks=[*callbacks, SaveConfig(saved)])
    model, data = objects.model, objects.data
    return getattr(trainer, subcommand)(model, datamodule=data, ckpt_path=config.ckpt_path)
