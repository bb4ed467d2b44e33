"""Detecting a non-finite training loss without a host-device sync per step.

Each step only keeps a reference to its (already computed) loss; the losses are checked in one
batched operation when values are read anyway: at logging steps and at epoch end.
"""
from __future__ import annotations

import torch


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite."""


class NonFiniteLossCheck:
    """Remembers recent losses and finds the first non-finite one on demand."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._losses: list[torch.Tensor] = []
        self._where: list[tuple[int, int, int]] = []  # (epoch, global step, batch index)

    def record(self, loss: torch.Tensor, epoch: int, step: int, batch_idx: int) -> None:
        """Keep the (detached) ``loss`` until the next :meth:`check`."""
        if self.enabled:
            self._losses.append(loss)
            self._where.append((epoch, step, batch_idx))

    def check(self) -> None:
        """Raise `NonFiniteLossError` naming the first bad step and batch since the last check."""
        if not self._losses:
            return
        finite = torch.isfinite(torch.stack(self._losses))
        if not bool(finite.all()):
            first = int((~finite).nonzero()[0, 0])
            epoch, step, batch_idx = self._where[first]
            value = float(self._losses[first])
            self.clear()
            raise NonFiniteLossError(
                f"The training loss is {value} at epoch {epoch}, global step {step}, batch index "
                f"{batch_idx} (the first non-finite loss). Lower the learning rate, clip gradients "
                "(gradient_clip_val), check the data of that batch, or use precision='32-true'."
            )
        self.clear()

    def clear(self) -> None:
        """Forget the recorded losses."""
        self._losses.clear()
        self._where.clear()


class NonFiniteGradientError(FloatingPointError):
    """A gradient became NaN or infinite."""


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
