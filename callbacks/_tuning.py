"""What the tuner's searches share: a quiet one-process Trainer for trials, the module restored
afterwards, and the attribute (``lr``, ``batch_size``) that a search reads and writes."""

from __future__ import annotations

import contextlib
import copy
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from callbacks.callback import Callback

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView


def inner_trainer(trainer: TrainerView, callbacks: Sequence[Callback], **overrides: Any) -> TrainerView:
    """A Trainer for trial runs with ``trainer``'s device, precision, accumulation and clipping,
    nothing written (no logger, checkpoint, bar or summary) and only ``callbacks``."""
    if trainer.world_size > 1:
        raise NotImplementedError(
            f"The tuner runs in one process; this Trainer has world size {trainer.world_size}. Tune with "
            "devices=1, then train with the found value on every device."
        )
    settings: dict[str, Any] = {
        "max_epochs": trainer.max_epochs,
        "accelerator": trainer.strategy.accelerator.kind,
        "devices": 1,
        "precision": trainer.precision,
        "accumulate_grad_batches": trainer.accumulate_grad_batches,
        "gradient_clip_val": trainer.gradient_clip_val,
        "gradient_clip_algorithm": trainer.gradient_clip_algorithm,
        "limit_train_batches": trainer.limit_train_batches,
        "limit_val_batches": 0,
        "num_sanity_val_steps": 0,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": trainer.default_root_dir,
        "callbacks": list(callbacks),
        **overrides,
    }
    return type(trainer)(**settings)


def attached_trainer(module: ModuleView) -> TrainerView | None:
    try:
        return module.trainer
    except RuntimeError:
        return None


@contextlib.contextmanager
def restored_module(module: ModuleView) -> Iterator[None]:
    """Trials train ``module``: afterwards it has its weights, mode and Trainer back."""
    state = copy.deepcopy(module.state_dict())
    training, trainer = module.training, attached_trainer(module)
    try:
        yield
    finally:
        module.load_state_dict(state)
        module.train(training)
        # read-only in ModuleView (and None): the module's setter takes the Trainer it was attached to, or None
        module.trainer = trainer  # type: ignore[misc, assignment]


def find_attr(
    module: ModuleView, datamodule: Any, name: str, candidates: Sequence[str], caller: str
) -> tuple[Callable[[], Any], Callable[[Any], None], str]:
    """(get, set, name) of the first of ``name`` / ``candidates`` found, as Lightning looks: an
    attribute of the module, its ``hparams``, an attribute of the DataModule, its ``hparams``."""
    names = [name] if name else list(candidates)
    for n in names:
        for owner in (module, datamodule):
            if owner is None:
                continue
            if hasattr(owner, n):
                return (lambda o=owner, n=n: getattr(o, n)), (lambda v, o=owner, n=n: setattr(o, n, v)), n
            hparams = getattr(owner, "hparams", None)
            if hparams is not None and n in hparams:
                return (lambda h=hparams, n=n: h[n]), (lambda v, h=hparams, n=n: h.__setitem__(n, v)), n
    raise AttributeError(
        f"{caller}: neither the module nor its hparams (nor the DataModule) has "
        + (f"{name!r}" if name else " or ".join(repr(c) for c in candidates))
        + "; name the attribute with attr_name=... / batch_arg_name=..."
    )
