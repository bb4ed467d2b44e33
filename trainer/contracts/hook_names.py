"""The names of the hooks and of the roles a callback may declare."""
from __future__ import annotations

# Every hook a callback may implement, by name (`Callback` defines each; a test checks both agree).
CALLBACK_HOOKS = (
    "setup",
    "teardown",
    "on_fit_start",
    "on_fit_end",
    "on_sanity_check_start",
    "on_sanity_check_end",
    "on_train_start",
    "on_train_end",
    "on_train_epoch_start",
    "on_train_epoch_end",
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "on_validation_start",
    "on_validation_end",
    "on_validation_epoch_start",
    "on_validation_epoch_end",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_test_start",
    "on_test_end",
    "on_test_epoch_start",
    "on_test_epoch_end",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_predict_start",
    "on_predict_end",
    "on_predict_epoch_start",
    "on_predict_epoch_end",
    "on_predict_batch_start",
    "on_predict_batch_end",
    "on_exception",
    "on_save_checkpoint",
    "on_load_checkpoint",
)

# Roles a callback declares (``Callback.role``) to stand in for one of the Trainer's defaults: a
# callback of role "checkpoint" is a checkpoint callback everywhere (``trainer.checkpoint_callbacks``,
# ``ckpt_path="best"``, the pre-emption save), one of role "progress_bar" replaces the default bar.
ROLES = ("checkpoint", "early_stopping", "progress_bar", "lr_monitor", "model_summary", "timer")
