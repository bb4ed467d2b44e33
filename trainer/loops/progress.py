"""`FitProgress` lives in the contracts floor (trainer/contracts/progress.py); this name stays importable."""
from __future__ import annotations

from trainer.contracts.progress import FitProgress

__all__ = ["FitProgress"]
