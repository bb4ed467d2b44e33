"""Building the user's model for a run: ``configure_model`` once, where the strategy builds layers.

``TrainModule.configure_model`` is where large layers are created (Lightning's hook). The Trainer
calls it before the strategy wraps the module, inside the strategy's `module_init_context` (the
device; the meta device under FSDP, where the strategy materializes the shards) and the
precision's (bf16 layers under ``"bf16-true"``), then converts the module to the precision's
dtype. A module object is configured once: ``fit`` then ``test`` on it do not build it twice.
Before any step, `check_trainable` refuses a model with nothing to train.
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer.module import TrainModule
    from trainer.contracts.internals import TrainerInternals as Trainer

_CONFIGURED: weakref.WeakSet[TrainModule] = weakref.WeakSet()


def configure_model(trainer: Trainer, model: TrainModule) -> None:
    """Call ``model.configure_model()`` once per module object, then put it in the run's precision."""
    if model not in _CONFIGURED:
        with trainer.strategy.module_init_context(), trainer.precision_plugin.module_init_context():
            model.configure_model()
        _CONFIGURED.add(model)
    trainer.precision_plugin.convert_module(model)


def check_trainable(model: TrainModule) -> None:
    """Before any step: a model with nothing to train fails later with a misleading message."""
    params = list(model.parameters())
    if not any(p.requires_grad for p in params):
        what = f"all {len(params)} of its parameters have requires_grad=False" if params else "it has none"
        raise ValueError(
            f"No parameter of {type(model).__name__} requires grad ({what}): there is nothing to train. "
            "Unfreeze the parameters to train (p.requires_grad_(True)) before trainer.fit."
        )
