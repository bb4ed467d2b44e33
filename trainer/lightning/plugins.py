"""``lightning.pytorch.plugins`` under ``python -m trainer.as_lightning``: of Lightning's plugins, only
the cluster environments are provided (``lightning.pytorch.plugins.environments``,
`trainer.lightning.environments`); any other name of the package is not provided.
"""
from __future__ import annotations

from trainer.lightning import environments
from trainer.lightning.unsupported import NOT_PROVIDED_NAMES, not_provided

__all__ = ["environments"]


def __getattr__(name: str) -> object:
    raise not_provided("pytorch_lightning.plugins", name, NOT_PROVIDED_NAMES["plugins"])
