"""Checkpoints: the file format, atomic writes, safe loading, and restoring a run exactly."""
