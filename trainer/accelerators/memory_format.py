"""``Trainer(channels_last=True)``: convolution models and image batches in ``torch.channels_last``.

NHWC ("channels last") is the layout cuDNN's and oneDNN's fastest convolution kernels use; with
the weights and the 4-D inputs both in it, no layout conversion runs per layer. The batch side
is done where batches are moved to the device (`trainer.accelerators.accelerator.move_to_device`).
"""
from __future__ import annotations

import torch
from torch import nn


def to_channels_last(module: nn.Module) -> nn.Module:
    """Put every 4-D parameter and buffer of ``module`` in ``torch.channels_last`` (in place)."""
    # torch < 2.14's stubs lack `Module.to`'s memory_format overload: the call is the same on every release
    moved: nn.Module = module.to(memory_format=torch.channels_last)  # type: ignore[call-overload,unused-ignore]
    return moved
