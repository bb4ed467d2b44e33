"""Run an unmodified Lightning script on Lockstep: ``python -m trainer.as_lightning SCRIPT [ARGS]``.

Importing this module makes ``lightning``, ``lightning.pytorch`` and ``pytorch_lightning`` resolve
to Lockstep in this process (`trainer.lightning.alias.install`), so the in-process form is one
line at the top of a notebook: ``import trainer.as_lightning``. docs/migration.md describes both.
"""
from __future__ import annotations

from trainer.lightning.alias import LIGHTNING_API_VERSION, install, main

__all__ = ["LIGHTNING_API_VERSION", "main"]

install()

if __name__ == "__main__":
    main()
