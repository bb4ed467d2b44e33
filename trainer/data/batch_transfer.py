"""A batch on its way to the device: the module's or DataModule's transfer hooks, or the plain move.

Lightning calls ``on_before_batch_transfer``, ``transfer_batch_to_device`` and
``on_after_batch_transfer`` on every batch, on any device. Lockstep calls them when the DataModule
or the module overrides one (the DataModule's hook when both do, as Lightning); otherwise a batch
moves as before, and not at all when it already is where it trains (CPU).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from trainer.data.data_hooks import DataHooks

if TYPE_CHECKING:
    from trainer.contracts.internals import TrainerInternals as Trainer

TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


class BatchTransfer:
    """``transfer(batch, dataloader_idx)``: the batch on the run's device, through the hooks overridden."""

    def __init__(self, trainer: Trainer, module: Any) -> None:
        owners = [o for o in (trainer.datamodule, module) if o is not None]
        self._hooks: dict[str, Callable[..., Any] | None] = {name: _override(owners, name) for name in TRANSFER_HOOKS}
        self.hooked = any(self._hooks.values())
        strategy = trainer.strategy
        self._device = strategy.root_device
        self._accelerator = strategy.accelerator
        self._channels_last = trainer.channels_last
        # CPU batches already are where they train (unless channels_last)
        self.moves = self.hooked or self._device.type != "cpu" or trainer.channels_last

    def __call__(self, batch: Any, dataloader_idx: int = 0) -> Any:
        before, to_device, after = self._hooks.values()
        if before is not None:
            batch = before(batch, dataloader_idx)
        if to_device is not None:
            batch = to_device(batch, self._device, dataloader_idx)
        else:
            batch = self._accelerator.move_batch(batch, self._device, channels_last=self._channels_last)
        if after is not None:
            batch = after(batch, dataloader_idx)
        return batch


def _override(owners: list[Any], name: str) -> Callable[..., Any] | None:
    for owner in owners:
        if getattr(type(owner), name, None) is not getattr(DataHooks, name):
            hook: Callable[..., Any] = getattr(owner, name)  # the owner's override of a DataHooks method
            return hook
    return None
