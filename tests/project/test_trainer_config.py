"""The Trainer's config: frozen sections, each Trainer argument in exactly one, checked when built."""
from __future__ import annotations

import ast
import dataclasses
import datetime
import inspect
import typing
from pathlib import Path

import pytest

from trainer import Trainer
from trainer.contracts import config as sections
from trainer.contracts.config import TrainerConfig

REPO = Path(__file__).resolve().parents[2]
SECTIONS = typing.get_type_hints(TrainerConfig)  # section name -> its dataclass


def _fields(kind: type) -> list[str]:
    return [f.name for f in dataclasses.fields(kind)]


def test_every_trainer_argument_lands_in_exactly_one_section():
    arguments = [name for name in inspect.signature(Trainer).parameters]
    held = [name for kind in SECTIONS.values() for name in _fields(kind)]
    assert sorted(held) == sorted(arguments)  # none missing, none twice, none extra
    assert set(SECTIONS) == {"limits", "loop", "precision", "checkpointing", "logging", "debug", "distributed"}


def test_the_trainer_passes_each_section_its_own_arguments_in_field_order():
    """Trainer.__init__ builds the sections positionally: each argument must be the field of that place."""
    tree = ast.parse((REPO / "trainer" / "trainer.py").read_text())
    calls = {
        node.func.id: [arg.id for arg in node.args if isinstance(arg, ast.Name)]
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id in {kind.__name__ for kind in SECTIONS.values()}
    }
    for kind in SECTIONS.values():
        assert calls[kind.__name__] == _fields(kind), kind.__name__


def test_the_sections_default_to_the_trainers_defaults():
    signature = inspect.signature(Trainer).parameters
    for kind in SECTIONS.values():
        for field in dataclasses.fields(kind):
            if field.name != "max_epochs":  # resolved when built (None: not given)
                assert field.default == signature[field.name].default, field.name


def test_the_config_and_its_sections_are_frozen():
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        trainer.config.limits = sections.Limits()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        trainer.config.limits.max_epochs = 3  # type: ignore[misc]
    with pytest.raises(AttributeError, match="is a setting, fixed when the Trainer is built"):
        trainer.max_epochs = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "build, error, message",
    [
        (lambda: sections.Limits(max_steps=-2), ValueError, "max_steps must be an int >= -1, got -2"),
        (lambda: sections.Limits(max_epochs=1.5), TypeError, "max_epochs must be an int >= -1, got 1.5"),
        (lambda: sections.Limits(limit_val_batches=1.5), ValueError, r"limit_val_batches as a fraction"),
        (lambda: sections.Limits(max_time="soon"), ValueError, "max_time"),
        (lambda: sections.LoopConfig(accumulate_grad_batches=0), ValueError, "accumulate_grad_batches must be"),
        (lambda: sections.LoopConfig(gradient_clip_algorithm="l2"), ValueError, "gradient_clip_algorithm must be"),
        (lambda: sections.LoopConfig(scale_lr="cubic"), ValueError, "scale_lr must be False, True, 'linear'"),
        (lambda: sections.LoopConfig(val_check_interval=0), ValueError, "val_check_interval as an int"),
        (lambda: sections.PrecisionConfig(deterministic="yes"), ValueError, "deterministic must be True"),
        (lambda: sections.CheckpointingConfig(enable_checkpointing="no"), TypeError, "enable_checkpointing must"),
        (lambda: sections.CheckpointingConfig(default_root_dir=3), TypeError, "default_root_dir must be"),
        (lambda: sections.LoggingConfig(log_every_n_steps=0), ValueError, "log_every_n_steps must be"),
        (lambda: sections.DebugConfig(fast_dev_run=-1), ValueError, "fast_dev_run must be >= 0"),
        (lambda: sections.DebugConfig(overfit_batches=None), TypeError, "overfit_batches must be"),
        (lambda: sections.DistributedConfig(devices=0), ValueError, "devices must be 'auto' or an int >= 1"),
        (lambda: sections.DistributedConfig(num_nodes=0), ValueError, "num_nodes must be an int >= 1"),
        (lambda: sections.DistributedConfig(strategy="dp"), ValueError, "Unknown strategy 'dp'"),
    ],
)
def test_a_section_checks_its_arguments_when_built(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_a_section_resolves_its_own_defaults():
    assert sections.Limits().max_epochs == 1000
    assert sections.Limits(max_time={"minutes": 1}).max_epochs == -1
    assert sections.Limits(max_time="00:00:01:00").max_time == datetime.timedelta(minutes=1)
    assert sections.LoopConfig(gradient_clip_val=1).gradient_clip_val == 1.0
    assert sections.DebugConfig(fast_dev_run=True).fast_dev_run == 1
    assert sections.DistributedConfig(devices="2").devices == 2


def test_fast_dev_run_and_overfit_batches_rewrite_the_limits_once():
    short = TrainerConfig(debug=sections.DebugConfig(fast_dev_run=2)).resolved()
    assert (short.limits.max_steps, short.limits.limit_val_batches, short.loop.num_sanity_val_steps) == (2, 2, 0)
    overfit = TrainerConfig(debug=sections.DebugConfig(overfit_batches=3)).resolved()
    assert (overfit.limits.limit_train_batches, overfit.limits.limit_val_batches) == (3, 3)
    plain = TrainerConfig()
    assert plain.resolved() is plain
