"""Detecting a non-finite training loss without a host-device sync per step.

Each step only keeps a reference to its (already computed) loss; the losses are checked in one
batched operation when values are read anyway: at logging steps and at epoch end.
"""
from __future__ import annotations

from typing import Any

import torch

from trainer.contracts.errors import NonFiniteGradientError, NonFiniteLossError

__all__ = ["NonFiniteGradientError", "NonFiniteLossCheck", "NonFiniteLossError", "check_finite_gradients"]


class NonFiniteLossCheck:
    """Remembers recent losses and finds the first non-finite one on demand.

    Once a non-finite loss was found, `check_before_save` keeps failing until `reset`: the weights
    that follow it must never be saved, not even by a save-on-crash callback.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._losses: list[torch.Tensor] = []
        self._where: list[tuple[int, int, int]] = []  # (epoch, global step, batch index)
        self._found: str | None = None  # the report of the first non-finite loss
        self._found_rank: int | None = None  # the rank whose loss it was (None: this one's)

    def record(self, loss: torch.Tensor, epoch: int, step: int, batch_idx: int) -> None:
        """Keep the (detached) ``loss`` until the next :meth:`check`."""
        if self.enabled:
            self._losses.append(loss)
            self._where.append((epoch, step, batch_idx))

    def check(self) -> None:
        """Raise `NonFiniteLossError` naming the first bad step and batch since the last check."""
        report = self._first_non_finite()
        if report is not None:
            self._found = report
            raise NonFiniteLossError(report)

    def check_before_save(self, strategy: Any, agree: bool = True) -> None:
        """`check` on every rank together, before a checkpoint is written (one host sync).

        Raises on every rank when any rank saw a non-finite loss: DDP averages gradients, so one
        rank's NaN is in every rank's weights. When a check already failed in this fit it raises
        again at once, without waiting for the other ranks. ``agree=False`` (a save while the run
        fails, when the other ranks may be gone): this rank's losses only, no collective.
        """
        found = self._found is not None
        report = self._found if found else self._first_non_finite()
        rank = self._found_rank if found else None
        if agree and not found and strategy.world_size > 1 and strategy.in_group:
            bad = [(r, text) for r, text in enumerate(strategy.all_gather_object(report)) if text is not None]
            if bad:
                rank = bad[0][0]
                report = bad[0][1] if rank == strategy.global_rank else f"On rank {rank}: {bad[0][1]}"
        if report is not None:
            self._found, self._found_rank = report, rank
            raise NonFiniteLossError(f"{report} No checkpoint is written after a non-finite loss.", rank)

    def _first_non_finite(self) -> str | None:
        if not self._losses:
            return None
        finite = torch.isfinite(torch.stack(self._losses))
        report = None
        if not bool(finite.all()):
            first = int((~finite).nonzero()[0, 0])
            epoch, step, batch_idx = self._where[first]
            report = (
                f"The training loss is {float(self._losses[first])} at epoch {epoch}, global step {step}, "
                f"batch index {batch_idx} (the first non-finite loss). Lower the learning rate, clip "
                "gradients (gradient_clip_val), check the data of that batch, or use precision='32-true'."
            )
        self.clear()
        return report

    def clear(self) -> None:
        """Forget the recorded losses."""
        self._losses.clear()
        self._where.clear()

    def reset(self) -> None:
        """Forget the losses and any non-finite loss found: a new fit starts."""
        self.clear()
        self._found = self._found_rank = None


def check_finite_gradients(
    named_params: list[tuple[str, torch.Tensor]], epoch: int, step: int, batch_idx: int, rank: int
) -> None:
    """Raise `NonFiniteGradientError` naming the first parameter whose gradient is not finite.

    One fused norm over all gradients and one host read: meant as an opt-in debugging check.
    """
    present = [(name, p.grad) for name, p in named_params if p.grad is not None]
    if not present:
        return
    norms = torch._foreach_norm([g for _, g in present])
    finite = torch.isfinite(torch.stack([n.float() for n in norms]))
    if bool(finite.all()):
        return
    name = present[int((~finite).nonzero()[0, 0])][0]
    raise NonFiniteGradientError(
        f"Non-finite gradient in parameter {name!r} on rank {rank} at epoch {epoch}, global step {step}, "
        f"after the accumulation window ending at batch index {batch_idx}. Check that layer's inputs, "
        "lower the learning rate or clip gradients."
    )
