"""``lightning.pytorch.strategies`` under ``python -m trainer.as_lightning``: Lockstep's strategies
(`trainer.strategies`, read from there on first use) and Lightning's ``DeepSpeedStrategy``, which
Lockstep cannot run but libraries subclass in modules that must still import (Ray Train's
``RayDeepSpeedStrategy``): it imports, subclasses and tests with ``isinstance``, and refuses an
instance (`trainer.lightning.unsupported.refused_class`); Lockstep's own ``trainer.strategies`` has no
such name.
"""
from __future__ import annotations

from typing import Any

import trainer.strategies as _strategies
from trainer.lightning.registries import StrategyRegistry
from trainer.lightning.unsupported import NOT_PROVIDED_NAMES, refused_class

__all__ = [*_strategies.__all__, "DeepSpeedStrategy", "StrategyRegistry"]

DeepSpeedStrategy = refused_class(__name__, "DeepSpeedStrategy", NOT_PROVIDED_NAMES["strategies.DeepSpeedStrategy"])


def __getattr__(name: str) -> Any:
    return getattr(_strategies, name)
