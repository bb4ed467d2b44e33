"""Checkpoint files, below the strategies: the single-file format, sharded directories (layout,
saving, safe reading, integrity) and FSDP's state adapters. Imports only torch, the standard
library and `trainer.contracts`; the strategies and the checkpoint connector both build on it."""
