"""`LightningAttributes`: the rest of Lightning's ``Trainer`` attributes that callbacks and
libraries read (``trainer.accelerator``, ``trainer.early_stopping_callback``,
``trainer.is_last_batch``, ...), answered from Lockstep's own state. Lightning's attributes that
Lockstep does not keep raise an error naming what to use instead (`NOT_PROVIDED_TRAINER_ATTRIBUTES`);
tests/project/test_lightning_namespace.py walks Lightning's ``Trainer`` and fails on a new name.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from trainer.unsupported import NotProvidedAttributeError

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
    """Lightning's names on the Trainer, read from the strategy, the callbacks and the loops."""

    @property
    def barebones(self) -> bool:
        """Always False: Lockstep refuses ``barebones=True`` (turn the extras off one by one)."""
        return False

    @property
    def accelerator(self) -> Any:
        """The strategy's `Accelerator` (``.kind``: ``"cpu"`` or ``"cuda"``)."""
        return _t(self).strategy.accelerator

    @property
    def num_devices(self) -> int:
        """Devices (processes) per node."""
        return len(self.device_ids)

    @property
    def device_ids(self) -> list[int]:
        """This node's device indices, one per process (``0..devices-1``)."""
        return list(range(_t(self).strategy.cluster_environment.local_world_size))

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        """``num_replicas`` and ``rank`` of a distributed run; None on one process."""
        t = _t(self)
        return {"num_replicas": t.world_size, "rank": t.global_rank} if t.world_size > 1 else None

    @property
    def early_stopping_callback(self) -> Any:
        """The first `EarlyStopping`, if any."""
        return next(iter(self.early_stopping_callbacks), None)

    @property
    def early_stopping_callbacks(self) -> list[Any]:
        """Every `EarlyStopping` (subclasses included)."""
        return [cb for cb in _t(self).callbacks if getattr(cb, "role", None) == "early_stopping"]

    @property
    def progress_bar_callback(self) -> Any:
        """The progress bar callback, if any."""
        return next((cb for cb in _t(self).callbacks if getattr(cb, "role", None) == "progress_bar"), None)

    @property
    def enable_validation(self) -> bool:
        """Whether the fit has validation batches to run."""
        return bool(_t(self).fit_loop.validation_enabled())

    @property
    def num_sanity_val_batches(self) -> list[int | None]:
        """Sanity-check batches per validation loader: ``num_sanity_val_steps``, at most the loader's."""
        t = _t(self)
        steps = t.num_sanity_val_steps
        return [n if steps == -1 or n is None else min(steps, n) for n in t.num_val_batches]

    @property
    def is_last_batch(self) -> bool:
        """Whether the training batch running now is its epoch's last."""
        return bool(_t(self).fit_loop.is_last_batch)

    @property
    def interrupted(self) -> bool:
        """Whether the last run ended by a ``KeyboardInterrupt``."""
        return bool(_t(self).state.interrupted)

    @property
    def scaler(self) -> Any:
        """The fp16 loss scaler (``"16-mixed"``), else None."""
        return _t(self).precision_plugin.scaler

    @contextlib.contextmanager
    def init_module(self, empty_init: bool | None = None) -> Iterator[None]:
        """Tensors made inside are made on this process's device, in the precision's dtype (``"*-true"``).

        ``empty_init`` is accepted for Lightning's signature; the weights are initialized either way.
        """
        del empty_init
        t = _t(self)
        with t.strategy.module_init_context(), t.precision_plugin.module_init_context():
            yield

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on each node's local rank 0, as Lightning's."""
        if _t(self).local_rank == 0:
            print(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name in NOT_PROVIDED_TRAINER_ATTRIBUTES:
            raise NotProvidedAttributeError(
                f"trainer.{name}: Lightning's Trainer attribute is not provided by Lockstep; use "
                f"{NOT_PROVIDED_TRAINER_ATTRIBUTES[name]} (docs/migration.md)."
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def _t(obj: object) -> Any:
    return obj  # the Trainer this mixin is part of, untyped here (its attributes live in other mixins)
