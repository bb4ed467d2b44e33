"""Devices: the accelerator, mixed precision, channels-last and torch.compile.

Lightning's accelerator classes (``lightning.pytorch.accelerators``) are not provided: the Trainer's
``accelerator=`` names the device; reading one raises an error that says so.
"""
from __future__ import annotations

from trainer.unsupported import not_provided


def __getattr__(name: str) -> object:
    raise not_provided(__name__, name)
