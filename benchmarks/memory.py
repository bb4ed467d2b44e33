"""Per-rank training-state bytes: parameters, gradients and optimizer state, from the tensors.

A rank's training state is what it keeps between steps: every parameter, its gradient and the
optimizer's per-parameter state (AdamW: ``exp_avg``, ``exp_avg_sq`` and a ``step`` scalar).
Under DDP each rank holds all of it; under FSDP each holds a shard: the parameters, gradients and
state tensors are DTensors and ``to_local()`` is this rank's part (shards are uneven when a
dimension does not divide by the world size). The bytes counted are those of the tensors
themselves, not of what the allocator reserved around them, so the numbers are the same on CPU
and GPU; transient memory (FSDP's all-gathered layers, activations) is in the peak-memory columns.
"""
from __future__ import annotations

from typing import Any

import torch

KINDS = ("params", "grads", "optimizer")


def _local_bytes(tensor: Any) -> int:
    if not isinstance(tensor, torch.Tensor):
        return 0
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor  # a DTensor's shard
    return local.numel() * local.element_size()


def state_bytes(optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """This rank's bytes of parameters, gradients and optimizer state, and their ``total``.

    Reads the parameters of ``optimizer``'s groups: call it after a step (the optimizer creates
    its state at the first step) and before the gradients are zeroed.
    """
    out = dict.fromkeys(KINDS, 0)
    for group in optimizer.param_groups:
        for param in group["params"]:
            out["params"] += _local_bytes(param)
            out["grads"] += _local_bytes(param.grad)
            out["optimizer"] += sum(_local_bytes(v) for v in optimizer.state.get(param, {}).values())
    out["total"] = sum(out[k] for k in KINDS)
    return out


class StateProbe:
    """Measures `state_bytes` once, right after the first optimizer step, then detaches itself.

    The sizes do not change after the first step, so the steps that are timed pay nothing.
    """

    def __init__(self) -> None:
        self.bytes: dict[str, int] | None = None

    def attach(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Measure after ``optimizer``'s first step; returns the optimizer."""

        def measure(opt: torch.optim.Optimizer, *_: Any) -> None:
            self.bytes = state_bytes(opt)
            handle.remove()

        handle = optimizer.register_step_post_hook(measure)
        return optimizer
