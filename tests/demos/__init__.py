"""Lockstep's `trainer.lightning.demos` against the installed Lightning's ``lightning.pytorch.demos``."""
