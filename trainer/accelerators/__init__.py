"""Devices: the accelerator, mixed precision, channels-last and torch.compile.

Lightning's accelerator classes (``lightning.pytorch.accelerators``) are not provided: the Trainer's
``accelerator=`` names the device; reading one raises an error that says so.
"""
from __future__ import annotations

from trainer.contracts.missing_names import missing_name


def __getattr__(name: str) -> object:
    raise missing_name(__name__, name)
