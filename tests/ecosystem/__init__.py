"""The ecosystem scan (issue 41, build item 9): what the registry's packages built on Lightning import
from it, and whether each name resolves under ``python -m trainer.as_lightning`` (`scan`, `probe`)."""
