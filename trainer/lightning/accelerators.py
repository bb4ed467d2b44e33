"""``lightning.pytorch.accelerators`` under ``python -m trainer.as_lightning``: Lightning's accelerator
classes. ``Trainer(accelerator=CPUAccelerator())`` is ``Trainer(accelerator="cpu")`` (the config asks
the object for `lockstep_flag`), and ``isinstance(trainer.accelerator, CUDAAccelerator)`` answers by
the device kind of Lockstep's own `trainer.accelerators.accelerator.Accelerator`, which the core keeps.
A library's subclass of `Accelerator` of another kind is refused at ``Trainer(...)``, naming what to use.
"""
from __future__ import annotations

from abc import ABCMeta
from typing import Any, ClassVar

import torch

from trainer.accelerators.accelerator import Accelerator as _CoreAccelerator
from trainer.lightning.registries import AcceleratorRegistry  # libraries register theirs (anomalib's XPUAccelerator)
from trainer.lightning.unsupported import NOT_PROVIDED_NAMES, not_provided, refused_class

__all__ = ["Accelerator", "AcceleratorRegistry", "CPUAccelerator", "CUDAAccelerator", "MPSAccelerator"]


class _ByKind(ABCMeta):
    # Lockstep's trainer.accelerator is its core Accelerator: Lightning's own classes recognise it by kind
    def __instancecheck__(cls, instance: Any) -> bool:
        if super().__instancecheck__(instance):
            return True
        if not isinstance(instance, _CoreAccelerator) or cls.__module__ != __name__:
            return False
        kind = cls.__dict__.get("_kind")
        return cls is Accelerator or instance.kind == kind


class Accelerator(metaclass=_ByKind):
    """Lightning's accelerator base, to subclass and test with ``isinstance``; an instance of one of
    its device classes (or of a subclass of those) is taken as ``Trainer(accelerator=...)``."""

    _kind: ClassVar[str | None] = None

    def lockstep_flag(self) -> str:
        """The Trainer's ``accelerator`` string this object stands for; raises for a kind Lockstep cannot run."""
        kind: str | None = next((k.__dict__["_kind"] for k in type(self).__mro__ if k.__dict__.get("_kind")), None)
        if kind is None or kind == "mps":
            raise NotImplementedError(
                f"Trainer(accelerator={type(self).__name__}()): Lockstep runs on CPUs and CUDA GPUs only; use "
                "Trainer(accelerator='cpu' | 'cuda' | 'auto') or CPUAccelerator() / CUDAAccelerator() (docs/migration.md)."
            )
        return kind

    def setup_device(self, device: torch.device) -> None:
        """Nothing: Lockstep's strategy sets the device up."""

    def teardown(self) -> None:
        """Nothing to release."""

    @staticmethod
    def parse_devices(devices: Any) -> Any:
        """``devices`` as given (Lockstep's Trainer parses ``devices=``)."""
        return devices

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """One CPU device per process (the device classes say theirs)."""
        return [torch.device("cpu")] * int(devices)

    @staticmethod
    def auto_device_count() -> int:
        """One device."""
        return 1

    @staticmethod
    def is_available() -> bool:
        """Whether this device kind can be used here."""
        return True


class CPUAccelerator(Accelerator):
    """Lightning's ``CPUAccelerator``: ``Trainer(accelerator=CPUAccelerator())`` trains on the CPU."""

    _kind = "cpu"


class CUDAAccelerator(Accelerator):
    """Lightning's ``CUDAAccelerator``: ``Trainer(accelerator=CUDAAccelerator())`` trains on CUDA GPUs."""

    _kind = "cuda"

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """The CUDA devices of the given indices (or the first ``devices``)."""
        indices = devices if isinstance(devices, (list, tuple)) else range(int(devices))
        return [torch.device("cuda", i) for i in indices]

    @staticmethod
    def auto_device_count() -> int:
        """The CUDA devices of this machine."""
        return torch.cuda.device_count()

    @staticmethod
    def is_available() -> bool:
        """Whether CUDA can be used."""
        return torch.cuda.is_available()


class MPSAccelerator(Accelerator):
    """Lightning's ``MPSAccelerator``, to name and test with ``isinstance``; Lockstep does not run on MPS."""

    _kind = "mps"

    @staticmethod
    def is_available() -> bool:
        """False: Lockstep does not run on MPS."""
        return False


XLAAccelerator = refused_class(__name__, "XLAAccelerator", NOT_PROVIDED_NAMES["accelerators.XLAAccelerator"])


def __getattr__(name: str) -> object:
    raise not_provided("pytorch_lightning.accelerators", name)
