"""`LambdaCallback`: a callback from functions, one per hook (Lightning's)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from callbacks.callback import Callback
from trainer.contracts.arguments import hint_misspelled_arguments

HOOKS = ('setup', 'teardown', 'on_fit_start', 'on_fit_end', 'on_sanity_check_start', 'on_sanity_check_end', 'on_train_batch_start', 'on_train_batch_end', 'on_train_epoch_start', 'on_train_epoch_end', 'on_validation_epoch_start', 'on_validation_epoch_end', 'on_test_epoch_start', 'on_test_epoch_end', 'on_validation_batch_start', 'on_validation_batch_end', 'on_test_batch_start', 'on_test_batch_end', 'on_train_start', 'on_train_end', 'on_validation_start', 'on_validation_end', 'on_test_start', 'on_test_end', 'on_exception', 'on_save_checkpoint', 'on_load_checkpoint', 'on_before_backward', 'on_after_backward', 'on_before_optimizer_step', 'on_before_zero_grad', 'on_predict_start', 'on_predict_end', 'on_predict_batch_start', 'on_predict_batch_end', 'on_predict_epoch_start', 'on_predict_epoch_end')


class LambdaCallback(Callback):
    """Each argument is a function called as that hook, with the hook's arguments
    (``on_train_epoch_end=lambda trainer, module: ...``). Only the hooks given are called.
    """

    def __new__(cls, **hooks: Any) -> "LambdaCallback":
        given = {name: fn for name, fn in hooks.items() if fn is not None}
        # the Trainer calls only the hooks a callback's class overrides: one class per instance
        members = {name: _as_hook(fn) for name, fn in given.items()}
        subclass = type(cls.__name__, (cls,), {"__qualname__": cls.__qualname__, "__module__": cls.__module__, **members})
        return super().__new__(subclass)

    @hint_misspelled_arguments
    def __init__(
        self,
        setup: Optional[Callable[..., Any]] = None,
        teardown: Optional[Callable[..., Any]] = None,
        on_fit_start: Optional[Callable[..., Any]] = None,
        on_fit_end: Optional[Callable[..., Any]] = None,
        on_sanity_check_start: Optional[Callable[..., Any]] = None,
        on_sanity_check_end: Optional[Callable[..., Any]] = None,
        on_train_batch_start: Optional[Callable[..., Any]] = None,
        on_train_batch_end: Optional[Callable[..., Any]] = None,
        on_train_epoch_start: Optional[Callable[..., Any]] = None,
        on_train_epoch_end: Optional[Callable[..., Any]] = None,
        on_validation_epoch_start: Optional[Callable[..., Any]] = None,
        on_validation_epoch_end: Optional[Callable[..., Any]] = None,
        on_test_epoch_start: Optional[Callable[..., Any]] = None,
        on_test_epoch_end: Optional[Callable[..., Any]] = None,
        on_validation_batch_start: Optional[Callable[..., Any]] = None,
        on_validation_batch_end: Optional[Callable[..., Any]] = None,
        on_test_batch_start: Optional[Callable[..., Any]] = None,
        on_test_batch_end: Optional[Callable[..., Any]] = None,
        on_train_start: Optional[Callable[..., Any]] = None,
        on_train_end: Optional[Callable[..., Any]] = None,
        on_validation_start: Optional[Callable[..., Any]] = None,
        on_validation_end: Optional[Callable[..., Any]] = None,
        on_test_start: Optional[Callable[..., Any]] = None,
        on_test_end: Optional[Callable[..., Any]] = None,
        on_exception: Optional[Callable[..., Any]] = None,
        on_save_checkpoint: Optional[Callable[..., Any]] = None,
        on_load_checkpoint: Optional[Callable[..., Any]] = None,
        on_before_backward: Optional[Callable[..., Any]] = None,
        on_after_backward: Optional[Callable[..., Any]] = None,
        on_before_optimizer_step: Optional[Callable[..., Any]] = None,
        on_before_zero_grad: Optional[Callable[..., Any]] = None,
        on_predict_start: Optional[Callable[..., Any]] = None,
        on_predict_end: Optional[Callable[..., Any]] = None,
        on_predict_batch_start: Optional[Callable[..., Any]] = None,
        on_predict_batch_end: Optional[Callable[..., Any]] = None,
        on_predict_epoch_start: Optional[Callable[..., Any]] = None,
        on_predict_epoch_end: Optional[Callable[..., Any]] = None,
    ) -> None:
        for name, fn in locals().items():
            if name in HOOKS and fn is not None and not callable(fn):
                raise TypeError(f"LambdaCallback({name}={fn!r}): expected a function.")


def _as_hook(fn: Callable[..., Any]) -> Callable[..., Any]:
    def hook(self: Callback, *args: Any) -> Any:
        return fn(*args)

    return hook
