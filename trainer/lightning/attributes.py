"""`LightningAttributes`: the rest of Lightning's ``Trainer`` attributes that callbacks and
libraries read (``trainer.accelerator``, ``trainer.early_stopping_callback``,
``trainer.is_last_batch``, ...), answered from Lockstep's own state by a view of one Trainer.
The Trainer does not inherit them: a name it lacks is looked up here (`lightning_attribute`).
Lightning's attributes that Lockstep does not keep raise an error naming what to use instead
(`NOT_PROVIDED_TRAINER_ATTRIBUTES`); tests/project/test_lightning_trainer_attributes.py walks
Lightning's ``Trainer`` and fails on a new name.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterator

from trainer.lightning.accelerator_connector import AcceleratorConnector
from trainer.lightning.unsupported import NotProvidedAttributeError

if TYPE_CHECKING:
    from trainer.contracts.internals import TrainerInternals

# Lightning's Trainer attributes Lockstep does not keep, and what to use instead
NOT_PROVIDED_TRAINER_ATTRIBUTES: dict[str, str] = {
    "ckpt_path": "the ckpt_path you passed (a resumed fit prints the file it resumed from: 'Resumed from ...')",
    "received_sigterm": "nothing: on SIGTERM Lockstep saves a checkpoint and exits itself (docs/fault-tolerance.md)",
    "validate_loop": "the hooks and callbacks (Lockstep's evaluation runs in trainer.loops.evaluation_loop)",
    "test_loop": "the hooks and callbacks (Lockstep's evaluation runs in trainer.loops.evaluation_loop)",
    "predict_loop": "the hooks and callbacks (Lockstep's evaluation runs in trainer.loops.evaluation_loop)",
    "val_check_batch": "val_check_interval, as given",
}


class LightningAttributes:
    """Lightning's names on one Trainer, read from its strategy, its callbacks and its loops."""

    def __init__(self, trainer: TrainerInternals) -> None:
        self._trainer = trainer

    @property
    def barebones(self) -> bool:
        """Always False: Lockstep refuses ``barebones=True`` (turn the extras off one by one)."""
        return False

    @property
    def accelerator(self) -> Any:
        """The strategy's `Accelerator` (``.kind``: ``"cpu"`` or ``"cuda"``)."""
        return self._trainer.strategy.accelerator

    @property
    def num_devices(self) -> int:
        """Devices (processes) per node."""
        return len(self.device_ids)

    @property
    def device_ids(self) -> list[int]:
        """This node's device indices, one per process (``0..devices-1``)."""
        return list(range(self._trainer.strategy.placement.local_world_size))

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        """``num_replicas`` and ``rank`` of a distributed run; None on one process."""
        t = self._trainer
        return {"num_replicas": t.world_size, "rank": t.global_rank} if t.world_size > 1 else None

    @property
    def early_stopping_callback(self) -> Any:
        """The first `EarlyStopping`, if any."""
        return next(iter(self.early_stopping_callbacks), None)

    @property
    def early_stopping_callbacks(self) -> list[Any]:
        """Every `EarlyStopping` (subclasses included)."""
        return [cb for cb in self._trainer.callbacks if getattr(cb, "role", None) == "early_stopping"]

    @property
    def progress_bar_callback(self) -> Any:
        """The progress bar callback, if any."""
        return next((cb for cb in self._trainer.callbacks if getattr(cb, "role", None) == "progress_bar"), None)

    @property
    def enable_validation(self) -> bool:
        """Whether the fit has validation batches to run."""
        return bool(self._trainer.fit_loop.validation_enabled())

    @property
    def num_sanity_val_batches(self) -> list[int | None]:
        """Sanity-check batches per validation loader: ``num_sanity_val_steps``, at most the loader's."""
        t = self._trainer
        steps = t.num_sanity_val_steps
        return [n if steps == -1 or n is None else min(steps, n) for n in t.num_val_batches]

    @property
    def is_last_batch(self) -> bool:
        """Whether the training batch running now is its epoch's last."""
        return bool(self._trainer.fit_loop.is_last_batch)

    @property
    def interrupted(self) -> bool:
        """Whether the last run ended by a ``KeyboardInterrupt``."""
        return bool(self._trainer.state.interrupted)

    @property
    def scaler(self) -> Any:
        """The fp16 loss scaler (``"16-mixed"``), else None."""
        return self._trainer.precision_plugin.scaler

    @contextlib.contextmanager
    def init_module(self, empty_init: bool | None = None) -> Iterator[None]:
        """Tensors made inside are made on this process's device, in the precision's dtype (``"*-true"``).

        ``empty_init`` is accepted for Lightning's signature; the weights are initialized either way.
        """
        del empty_init
        t = self._trainer
        with t.strategy.module_init_context(), t.precision_plugin.module_init_context():
            yield

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on each node's local rank 0, as Lightning's."""
        if self._trainer.local_rank == 0:
            print(*args, **kwargs)

    @property
    def _accelerator_connector(self) -> AcceleratorConnector:
        # Lightning's private name, kept for the integrations that read it (`AcceleratorConnector`)
        return AcceleratorConnector(self._trainer.strategy)


# what `lightning_attribute` answers: the view's names (``_accelerator_connector`` is Lightning's too)
_NAMES = frozenset(name for name in vars(LightningAttributes) if not name.startswith("__") and name != "_trainer")


def lightning_attribute(trainer: TrainerInternals, name: str) -> Any:
    """Lightning's Trainer attribute ``name`` of ``trainer`` (the Trainer's ``__getattr__``: names it lacks).

    Raises `NotProvidedAttributeError` for one Lockstep does not keep, else Python's `AttributeError`.
    """
    if name in _NAMES:
        return getattr(LightningAttributes(trainer), name)
    if name in NOT_PROVIDED_TRAINER_ATTRIBUTES:
        raise NotProvidedAttributeError(
            f"trainer.{name}: Lightning's Trainer attribute is not provided by Lockstep; use "
            f"{NOT_PROVIDED_TRAINER_ATTRIBUTES[name]} (docs/migration.md)."
        )
    raise AttributeError(f"{type(trainer).__name__!r} object has no attribute {name!r}")
