"""The one device abstraction: which device a rank trains on and how batches get there.

Every CUDA-specific call (device pinning, pinned memory, non-blocking copies, the NCCL backend)
sits behind this class so CPU runs exercise the same code path with CPU answers.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader

from trainer.data.batch import apply_to_tensors

_ACCELERATORS = ("auto", "cpu", "cuda", "gpu")


class Accelerator:
    """A device kind (``"cpu"`` or ``"cuda"``) and the operations that differ between them."""

    def __init__(self, kind: str) -> None:
        if kind not in ("cpu", "cuda"):
            raise ValueError(f"Accelerator kind must be 'cpu' or 'cuda', got {kind!r}")
        self.kind = kind

    @classmethod
    def from_flag(cls, accelerator: object) -> Accelerator:
        """Resolve the Trainer's ``accelerator`` argument; ``"auto"`` picks CUDA when available."""
        if not isinstance(accelerator, str):
            choices = ", ".join(map(repr, _ACCELERATORS))
            raise TypeError(f"accelerator must be a str, one of {choices}; got {accelerator!r}")
        if accelerator.lower() not in _ACCELERATORS:
            raise ValueError(
                f"Unknown accelerator {accelerator!r}. Use one of {', '.join(map(repr, _ACCELERATORS))}."
            )
        flag = accelerator.lower()
        if flag == "auto":
            return cls("cuda" if torch.cuda.is_available() else "cpu")
        if flag in ("cuda", "gpu"):
            if not torch.cuda.is_available():
                raise RuntimeError(
                    f"accelerator={accelerator!r} was requested but CUDA is not available on this "
                    "machine (torch.cuda.is_available() is False). Use accelerator='cpu' or 'auto'."
                )
            return cls("cuda")
        return cls("cpu")

    @property
    def distributed_backend(self) -> str:
        """The torch.distributed backend for this device kind."""
        return "nccl" if self.kind == "cuda" else "gloo"

    def device_count(self) -> int:
        """Devices of this kind on the machine (CPU counts as one)."""
        return torch.cuda.device_count() if self.kind == "cuda" else 1

    def device_for(self, local_rank: int) -> torch.device:
        """The device a process with ``local_rank`` trains on."""
        if self.kind == "cuda":
            return torch.device("cuda", local_rank)
        return torch.device("cpu")

    def pin_device(self, device: torch.device) -> None:
        """Make ``device`` the current device (before the process group exists, for NCCL)."""
        if self.kind == "cuda":
            torch.cuda.set_device(device)

    @property
    def pin_memory(self) -> bool:
        """Whether host batches should live in pinned memory (so copies can be asynchronous)."""
        return self.kind == "cuda"

    def move_batch(self, batch: Any, device: torch.device, channels_last: bool = False) -> Any:
        """Move every tensor in ``batch`` to ``device``, non-blocking where that is safe.

        ``channels_last`` also puts 4-D tensors (image batches) in ``torch.channels_last``.
        """
        return move_to_device(batch, device, non_blocking=self.kind == "cuda", channels_last=channels_last)

    def pin_loader_memory(self, loader: Any) -> bool:
        """On CUDA, make a DataLoader that does not pin yet put its batches in pinned memory.

        Pinned (page-locked) host memory is what makes ``non_blocking`` copies asynchronous: from
        ordinary memory the copy blocks the host. The loader is changed in place (it is the one
        the run iterates; a distributed strategy may already have rebuilt it); loaders that are
        not DataLoaders, and DataLoaders whose persistent workers already run, are left alone.
        Returns whether pinning was turned on.
        """
        if self.kind != "cuda" or not isinstance(loader, DataLoader) or loader.pin_memory:
            return False
        if loader._iterator is not None:  # the iterator read the setting already
            return False
        loader.pin_memory = True
        return True


def move_to_device(
    batch: Any, device: torch.device, non_blocking: bool = False, channels_last: bool = False
) -> Any:
    """Move every tensor in ``batch`` (see `trainer.data.batch`) to ``device``, keeping the
    container types; other objects with a ``.to`` method are moved with ``.to(device)``.

    With ``channels_last``, 4-D tensors also get the ``torch.channels_last`` memory format (in
    the same copy when the device changes).
    """

    def move(tensor: torch.Tensor) -> torch.Tensor:
        if channels_last and tensor.dim() == 4:
            return tensor.to(device, non_blocking=non_blocking, memory_format=torch.channels_last)
        return tensor.to(device, non_blocking=non_blocking)

    def move_other(obj: Any) -> Any:
        to = getattr(obj, "to", None)  # user types that know how to move
        return to(device) if callable(to) else obj

    return apply_to_tensors(batch, move, move_other)
