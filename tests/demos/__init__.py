"""Lockstep's `trainer.demos` against the installed Lightning's ``lightning.pytorch.demos``."""
