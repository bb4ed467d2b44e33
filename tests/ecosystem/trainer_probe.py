"""Read attribute chains on a Trainer made the way libraries make one, and print, as one JSON line,
what each read gives: ``ok``, or ``error: <exception>``.

``python -m tests.ecosystem.trainer_probe FILE`` (Lightning's Trainer) or
``python -m trainer.as_lightning -m tests.ecosystem.trainer_probe FILE`` (Lockstep's), FILE holding
a JSON list of chains (``"fit_loop.epoch_loop.val_loop"``). The Trainer is fresh (not fitted), on
CPU, with no logger, checkpointing, progress bar or model summary: a chain through something made
only by ``fit`` (``trainer.lightning_module.x``) fails on both sides and is not compared.
"""
from __future__ import annotations

import json
import sys
import warnings
from typing import Any


def read(chains: list[str]) -> dict[str, str]:
    """Each chain's outcome on one fresh Trainer."""
    import lightning.pytorch as pl

    warnings.simplefilter("ignore")
    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    seen = {}
    for chain in chains:
        value: Any = trainer
        try:
            for part in chain.split("."):
                value = getattr(value, part)
            seen[chain] = "ok"
        except Exception as err:  # noqa: BLE001 - the failure is the answer for that chain
            seen[chain] = f"error: {type(err).__name__}: {str(err)[:200]}"
    return seen


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(json.dumps(read(json.load(f))))
