"""The names of the hooks and of the roles a callback may declare."""
from __future__ import annotations

from trainer.contracts.hook_table import CALLBACK, implemented_by

# Every hook a callback may implement, by name, read from the one hook table (`Callback` defines
# each; tests/project/test_hook_table.py checks both agree).
CALLBACK_HOOKS = implemented_by(CALLBACK)

# Roles a callback declares (``Callback.role``) to stand in for one of the Trainer's defaults: a
# callback of role "checkpoint" is a checkpoint callback everywhere (``trainer.checkpoint_callbacks``,
# ``ckpt_path="best"``, the pre-emption save), one of role "progress_bar" replaces the default bar.
ROLES = ("checkpoint", "early_stopping", "progress_bar", "lr_monitor", "model_summary", "timer")
