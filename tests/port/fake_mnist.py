"""A stand-in for ``lightning.pytorch.demos.mnist_datamodule.MNIST`` with MNIST's sizes and no download.

Images are made from their index on demand (1x28x28 in [0, 1]), so the 60,000-image train split
costs nothing until a batch is read.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset

_TORCHVISION_AVAILABLE = True


class MNIST(Dataset):
    """``MNIST(root, train=True, download=False, transform=None)``: 60,000 or 10,000 synthetic digits."""

    def __init__(self, root: str, train: bool = True, download: bool = False, transform: Any = None) -> None:
        self.train = train

    def __len__(self) -> int:
        return 60_000 if self.train else 10_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(index + (0 if self.train else 1_000_000))
        return torch.rand(1, 28, 28, generator=g), int(index % 10)
