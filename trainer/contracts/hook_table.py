"""The one table of hooks: each hook's name, arguments, who may implement it, and the runs that call it.

Everything else that lists hooks is read from here or checked against it: the callback hooks the
dispatcher walks (`trainer/hooks.py`), the module-only hooks looked up once per run, the
evaluation loop's hook names (`trainer/stage.py`), the stubs of `Callback`, `TrainModule` and
`DataModule`, and the hook tables of docs/train-module.md (tests/project/test_hook_table.py).
"""
from __future__ import annotations

import dataclasses

# who may implement a hook
MODULE, CALLBACK, DATAMODULE = "module", "callback", "datamodule"
# the runs (trainer entry points) that call a hook; the sanity check is part of "fit"
FIT, VALIDATE, TEST, PREDICT = "fit", "validate", "test", "predict"
_ALL = (FIT, VALIDATE, TEST, PREDICT)


@dataclasses.dataclass(frozen=True)
class Hook:
    """One hook: ``name(args)`` on the module and the DataModule, ``name(trainer, module, *args)`` on callbacks."""

    name: str
    args: tuple[str, ...]  # as the docs write them: ``"dataloader_idx=0"`` shows a default
    implementers: frozenset[str]  # MODULE, CALLBACK, DATAMODULE
    stages: tuple[str, ...]  # the runs that call it (empty: defined for Lightning, never called)

    @property
    def parameters(self) -> tuple[str, ...]:
        """The argument names, defaults left out."""
        return tuple(a.split("=")[0] for a in self.args)

    @property
    def signature(self) -> str:
        """``name(arg, ...)``, as docs/train-module.md writes it."""
        return f"{self.name}({', '.join(self.args)})"


def _hooks(names: str, args: tuple[str, ...], who: tuple[str, ...], stages: tuple[str, ...]) -> list[Hook]:
    return [Hook(n, args, frozenset(who), stages) for n in names.split()]


_MC, _M, _MD = (MODULE, CALLBACK), (MODULE,), (MODULE, DATAMODULE)
_BATCH, _EVAL_BATCH = ("batch", "batch_idx"), ("batch", "batch_idx", "dataloader_idx=0")


def _evaluation(prefix: str, stages: tuple[str, ...]) -> list[Hook]:
    """One evaluation stage's hooks (validation, test, predict): the same shapes, its own names."""
    return [
        *_hooks(f"on_{prefix}_start on_{prefix}_end on_{prefix}_epoch_start on_{prefix}_epoch_end", (), _MC, stages),
        *_hooks(f"on_{prefix}_batch_start", _EVAL_BATCH, _MC, stages),
        *_hooks(f"on_{prefix}_batch_end", ("outputs", *_EVAL_BATCH), _MC, stages),
    ]


HOOKS: tuple[Hook, ...] = (
    # -- set-up and tear-down
    *_hooks("prepare_data", (), _MD, _ALL),
    *_hooks("setup teardown", ("stage",), (MODULE, CALLBACK, DATAMODULE), _ALL),
    *_hooks("configure_model configure_callbacks", (), _M, _ALL),
    *_hooks("train_dataloader", (), _MD, (FIT,)),
    *_hooks("val_dataloader", (), _MD, (FIT, VALIDATE)),
    *_hooks("test_dataloader", (), _MD, (TEST,)),
    *_hooks("predict_dataloader", (), _MD, (PREDICT,)),
    *_hooks("on_before_batch_transfer on_after_batch_transfer", ("batch", "dataloader_idx"), _MD, _ALL),
    *_hooks("transfer_batch_to_device", ("batch", "device", "dataloader_idx"), _MD, _ALL),
    *_hooks("on_fit_start on_fit_end", (), _MC, (FIT,)),
    *_hooks("on_sanity_check_start on_sanity_check_end", (), (CALLBACK,), (FIT,)),
    # -- training
    *_hooks("on_train_start on_train_end on_train_epoch_start on_train_epoch_end", (), _MC, (FIT,)),
    *_hooks("on_train_batch_start", _BATCH, _MC, (FIT,)),
    *_hooks("on_train_batch_end", ("outputs", *_BATCH), _MC, (FIT,)),
    *_hooks("on_before_backward", ("loss",), _MC, (FIT,)),
    *_hooks("on_after_backward", (), _MC, (FIT,)),
    *_hooks("on_before_optimizer_step on_before_zero_grad", ("optimizer",), _MC, (FIT,)),
    *_hooks("backward", ("loss",), _M, (FIT,)),
    *_hooks("optimizer_step", ("epoch", "batch_idx", "optimizer", "optimizer_closure"), _M, (FIT,)),
    *_hooks("optimizer_zero_grad", ("epoch", "batch_idx", "optimizer"), _M, (FIT,)),
    *_hooks("lr_scheduler_step", ("scheduler", "metric"), _M, (FIT,)),
    *_hooks(
        "configure_gradient_clipping", ("optimizer", "gradient_clip_val", "gradient_clip_algorithm"), _M, (FIT,)
    ),
    # -- evaluation
    *_evaluation("validation", (FIT, VALIDATE)),
    *_hooks("on_validation_model_zero_grad", (), _M, (FIT,)),
    *_hooks("on_validation_model_eval on_validation_model_train", (), _M, (FIT, VALIDATE)),
    *_evaluation("test", (TEST,)),
    *_hooks("on_test_model_eval on_test_model_train", (), _M, (TEST,)),
    *_evaluation("predict", (PREDICT,)),
    *_hooks("on_predict_model_eval", (), _M, (PREDICT,)),
    *_hooks("on_predict_model_train", (), _M, ()),  # Lightning defines it; its loop never calls it
    # -- failures and checkpoints
    *_hooks("on_exception", ("exception",), (CALLBACK, DATAMODULE), _ALL),
    *_hooks("on_save_checkpoint", ("checkpoint",), _MC, _ALL),  # trainer.save_checkpoint, after any run
    *_hooks("on_load_checkpoint", ("checkpoint",), _MC, (FIT,)),  # fit(ckpt_path=...)
)

HOOKS_BY_NAME: dict[str, Hook] = {h.name: h for h in HOOKS}


def implemented_by(who: str) -> tuple[str, ...]:
    """The names of the hooks ``who`` (MODULE, CALLBACK, DATAMODULE) may implement, in table order."""
    return tuple(h.name for h in HOOKS if who in h.implementers)
