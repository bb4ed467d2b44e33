"""The order in which module and callback hooks run, written out in full.

``EXPECTED_FIT`` and friends are concrete runs of the hook-order table in docs/train-module.md
and docs/callbacks.md: a change in the order of any hook (module or callback) breaks this test,
and then the table must change with it.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from callbacks.callback import Callback
from tests.helpers.models import QUIET
from trainer import Trainer, TrainModule
from trainer.hooks import CALLBACK_HOOKS, HookDispatcher


def _loader(n: int) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 2, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=2)


class RecordingModule(TrainModule):
    """Appends ``"module.<hook>(<arg>)"`` to ``events`` for every TrainModule method it runs."""

    def __init__(self, events: list[str], fail_at: int | None = None) -> None:
        super().__init__()
        self.net = nn.Linear(2, 1)
        self.events = events
        self.fail_at = fail_at
        self.seen_at_epoch_end: list[bool] = []

    def _rec(self, name: str, arg: Any = None) -> None:
        self.events.append(f"module.{name}" if arg is None else f"module.{name}({arg})")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    # steps and set-up
    def prepare_data(self) -> None:
        self._rec("prepare_data")

    def setup(self, stage: str) -> None:
        self._rec("setup", stage)

    def teardown(self, stage: str) -> None:
        self._rec("teardown", stage)

    def configure_optimizers(self) -> Any:
        self._rec("configure_optimizers")
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self._rec("training_step", batch_idx)
        if batch_idx == self.fail_at:
            raise RuntimeError("boom")
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._rec("validation_step", batch_idx)
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._rec("test_step", batch_idx)
        x, y = batch
        self.log("test_loss", nn.functional.mse_loss(self(x), y))

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self._rec("predict_step", batch_idx)
        return self(batch[0])

    # dataloaders: passed to the entry points, so never called here
    def train_dataloader(self) -> Any:
        self._rec("train_dataloader")

    def val_dataloader(self) -> Any:
        self._rec("val_dataloader")

    def test_dataloader(self) -> Any:
        self._rec("test_dataloader")

    def predict_dataloader(self) -> Any:
        self._rec("predict_dataloader")

    # hooks
    def on_fit_start(self) -> None:
        self._rec("on_fit_start")

    def on_fit_end(self) -> None:
        self._rec("on_fit_end")

    def on_train_start(self) -> None:
        self._rec("on_train_start")

    def on_train_end(self) -> None:
        self._rec("on_train_end")

    def on_train_epoch_start(self) -> None:
        self._rec("on_train_epoch_start")

    def on_train_epoch_end(self) -> None:
        self._rec("on_train_epoch_end")
        self.seen_at_epoch_end.append("train_loss_epoch" in self.trainer.callback_metrics)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self._rec("on_train_batch_start", batch_idx)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._rec("on_train_batch_end", batch_idx)

    def on_validation_start(self) -> None:
        self._rec("on_validation_start")

    def on_validation_end(self) -> None:
        self._rec("on_validation_end")

    def on_validation_epoch_start(self) -> None:
        self._rec("on_validation_epoch_start")

    def on_validation_epoch_end(self) -> None:
        self._rec("on_validation_epoch_end")

    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._rec("on_validation_batch_start", batch_idx)

    def on_validation_batch_end(
        self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._rec("on_validation_batch_end", batch_idx)

    def on_test_start(self) -> None:
        self._rec("on_test_start")

    def on_test_end(self) -> None:
        self._rec("on_test_end")

    def on_test_epoch_start(self) -> None:
        self._rec("on_test_epoch_start")

    def on_test_epoch_end(self) -> None:
        self._rec("on_test_epoch_end")
        self.seen_at_epoch_end.append("test_loss" in self.trainer.callback_metrics)

    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._rec("on_test_batch_start", batch_idx)

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._rec("on_test_batch_end", batch_idx)

    def on_predict_start(self) -> None:
        self._rec("on_predict_start")

    def on_predict_end(self) -> None:
        self._rec("on_predict_end")

    def on_predict_epoch_start(self) -> None:
        self._rec("on_predict_epoch_start")

    def on_predict_epoch_end(self) -> None:
        self._rec("on_predict_epoch_end")

    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._rec("on_predict_batch_start", batch_idx)

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._rec("on_predict_batch_end", batch_idx)

    def on_before_backward(self, loss: torch.Tensor) -> None:
        self._rec("on_before_backward")

    def on_after_backward(self) -> None:
        self._rec("on_after_backward")

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self._rec("on_before_optimizer_step")

    def on_before_zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        self._rec("on_before_zero_grad")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._rec("on_save_checkpoint")

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._rec("on_load_checkpoint")


class Recorder(Callback):
    """Appends ``"callback.<hook>(<arg>)"`` to ``events`` for every Callback hook."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.exception: BaseException | None = None
        self.seen_at_epoch_end: list[bool] = []

    def _rec(self, name: str, arg: Any = None) -> None:
        self.events.append(f"callback.{name}" if arg is None else f"callback.{name}({arg})")

    def setup(self, trainer, module, stage):
        self._rec("setup", stage)

    def teardown(self, trainer, module, stage):
        self._rec("teardown", stage)

    def on_fit_start(self, trainer, module):
        self._rec("on_fit_start")

    def on_fit_end(self, trainer, module):
        self._rec("on_fit_end")

    def on_sanity_check_start(self, trainer, module):
        self._rec("on_sanity_check_start")

    def on_sanity_check_end(self, trainer, module):
        self._rec("on_sanity_check_end")

    def on_train_start(self, trainer, module):
        self._rec("on_train_start")

    def on_train_end(self, trainer, module):
        self._rec("on_train_end")

    def on_train_epoch_start(self, trainer, module):
        self._rec("on_train_epoch_start")

    def on_train_epoch_end(self, trainer, module):
        self._rec("on_train_epoch_end")
        self.seen_at_epoch_end.append("train_loss_epoch" in trainer.callback_metrics)

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self._rec("on_train_batch_start", batch_idx)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self._rec("on_train_batch_end", batch_idx)

    def on_before_backward(self, trainer, module, loss):
        self._rec("on_before_backward")

    def on_after_backward(self, trainer, module):
        self._rec("on_after_backward")

    def on_before_optimizer_step(self, trainer, module, optimizer):
        self._rec("on_before_optimizer_step")

    def on_before_zero_grad(self, trainer, module, optimizer):
        self._rec("on_before_zero_grad")

    def on_validation_start(self, trainer, module):
        self._rec("on_validation_start")

    def on_validation_end(self, trainer, module):
        self._rec("on_validation_end")

    def on_validation_epoch_start(self, trainer, module):
        self._rec("on_validation_epoch_start")

    def on_validation_epoch_end(self, trainer, module):
        self._rec("on_validation_epoch_end")

    def on_validation_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0):
        self._rec("on_validation_batch_start", batch_idx)

    def on_validation_batch_end(self, trainer, module, outputs, batch, batch_idx, dataloader_idx=0):
        self._rec("on_validation_batch_end", batch_idx)

    def on_test_start(self, trainer, module):
        self._rec("on_test_start")

    def on_test_end(self, trainer, module):
        self._rec("on_test_end")

    def on_test_epoch_start(self, trainer, module):
        self._rec("on_test_epoch_start")

    def on_test_epoch_end(self, trainer, module):
        self._rec("on_test_epoch_end")
        self.seen_at_epoch_end.append("test_loss" in trainer.callback_metrics)

    def on_test_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0):
        self._rec("on_test_batch_start", batch_idx)

    def on_test_batch_end(self, trainer, module, outputs, batch, batch_idx, dataloader_idx=0):
        self._rec("on_test_batch_end", batch_idx)

    def on_predict_start(self, trainer, module):
        self._rec("on_predict_start")

    def on_predict_end(self, trainer, module):
        self._rec("on_predict_end")

    def on_predict_epoch_start(self, trainer, module):
        self._rec("on_predict_epoch_start")

    def on_predict_epoch_end(self, trainer, module):
        self._rec("on_predict_epoch_end")

    def on_predict_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0):
        self._rec("on_predict_batch_start", batch_idx)

    def on_predict_batch_end(self, trainer, module, outputs, batch, batch_idx, dataloader_idx=0):
        self._rec("on_predict_batch_end", batch_idx)

    def on_exception(self, trainer, module, exception):
        self._rec("on_exception", type(exception).__name__)
        self.exception = exception

    def on_save_checkpoint(self, trainer, module, checkpoint):
        self._rec("on_save_checkpoint")

    def on_load_checkpoint(self, trainer, module, checkpoint):
        self._rec("on_load_checkpoint")


# One training micro batch that does not end its window, and one that does (A = 2).
# fmt: off
EXPECTED_FIT = [
    "module.prepare_data",
    "module.setup(fit)", "callback.setup(fit)",
    "module.configure_optimizers",
    "module.on_fit_start", "callback.on_fit_start",
    # sanity check: num_sanity_val_steps=1 batch
    "callback.on_sanity_check_start",
    "module.on_validation_start", "callback.on_validation_start",
    "module.on_validation_epoch_start", "callback.on_validation_epoch_start",
    "module.on_validation_batch_start(0)", "callback.on_validation_batch_start(0)",
    "module.validation_step(0)",
    "module.on_validation_batch_end(0)", "callback.on_validation_batch_end(0)",
    "module.on_validation_epoch_end", "callback.on_validation_epoch_end",
    "module.on_validation_end", "callback.on_validation_end",
    "callback.on_sanity_check_end",
    "module.on_train_start", "callback.on_train_start",
    # epoch 0: batches 0-1 are one window, batch 2 is the shorter last window
    "module.on_train_epoch_start", "callback.on_train_epoch_start",
    "module.on_train_batch_start(0)", "callback.on_train_batch_start(0)",
    "module.training_step(0)",
    "module.on_before_backward", "callback.on_before_backward",
    "module.on_after_backward", "callback.on_after_backward",
    "module.on_train_batch_end(0)", "callback.on_train_batch_end(0)",
    "module.on_train_batch_start(1)", "callback.on_train_batch_start(1)",
    "module.training_step(1)",
    "module.on_before_backward", "callback.on_before_backward",
    "module.on_after_backward", "callback.on_after_backward",
    "module.on_before_optimizer_step", "callback.on_before_optimizer_step",
    "module.on_before_zero_grad", "callback.on_before_zero_grad",
    "module.on_train_batch_end(1)", "callback.on_train_batch_end(1)",
    "module.on_train_batch_start(2)", "callback.on_train_batch_start(2)",
    "module.training_step(2)",
    "module.on_before_backward", "callback.on_before_backward",
    "module.on_after_backward", "callback.on_after_backward",
    "module.on_before_optimizer_step", "callback.on_before_optimizer_step",
    "module.on_before_zero_grad", "callback.on_before_zero_grad",
    "module.on_train_batch_end(2)", "callback.on_train_batch_end(2)",
    # validation at the epoch's end (limit_val_batches=2)
    "module.on_validation_start", "callback.on_validation_start",
    "module.on_validation_epoch_start", "callback.on_validation_epoch_start",
    "module.on_validation_batch_start(0)", "callback.on_validation_batch_start(0)",
    "module.validation_step(0)",
    "module.on_validation_batch_end(0)", "callback.on_validation_batch_end(0)",
    "module.on_validation_batch_start(1)", "callback.on_validation_batch_start(1)",
    "module.validation_step(1)",
    "module.on_validation_batch_end(1)", "callback.on_validation_batch_end(1)",
    "module.on_validation_epoch_end", "callback.on_validation_epoch_end",
    "module.on_validation_end", "callback.on_validation_end",
    "module.on_train_epoch_end", "callback.on_train_epoch_end",
    # epoch 1: the same
    "module.on_train_epoch_start", "callback.on_train_epoch_start",
    "module.on_train_batch_start(0)", "callback.on_train_batch_start(0)",
    "module.training_step(0)",
    "module.on_before_backward", "callback.on_before_backward",
    "module.on_after_backward", "callback.on_after_backward",
    "module.on_train_batch_end(0)", "callback.on_train_batch_end(0)",
    "module.on_train_batch_start(1)", "callback.on_train_batch_start(1)",
    "module.training_step(1)",
    "module.on_before_backward", "callback.on_before_backward",
    "module.on_after_backward", "callback.on_after_backward",
    "module.on_before_optimizer_step", "callback.on_before_optimizer_step",
    "module.on_before_zero_grad", "callback.on_before_zero_grad",
    "module.on_train_batch_end(1)", "callback.on_train_batch_end(1)",
    "module.on_train_batch_start(2)", "callback.on_train_batch_start(2)",
    "module.training_step(2)",
    "module.on_before_backward", "callback.on_before_backward",
    "module.on_after_backward", "callback.on_after_backward",
    "module.on_before_optimizer_step", "callback.on_before_optimizer_step",
    "module.on_before_zero_grad", "callback.on_before_zero_grad",
    "module.on_train_batch_end(2)", "callback.on_train_batch_end(2)",
    "module.on_validation_start", "callback.on_validation_start",
    "module.on_validation_epoch_start", "callback.on_validation_epoch_start",
    "module.on_validation_batch_start(0)", "callback.on_validation_batch_start(0)",
    "module.validation_step(0)",
    "module.on_validation_batch_end(0)", "callback.on_validation_batch_end(0)",
    "module.on_validation_batch_start(1)", "callback.on_validation_batch_start(1)",
    "module.validation_step(1)",
    "module.on_validation_batch_end(1)", "callback.on_validation_batch_end(1)",
    "module.on_validation_epoch_end", "callback.on_validation_epoch_end",
    "module.on_validation_end", "callback.on_validation_end",
    "module.on_train_epoch_end", "callback.on_train_epoch_end",
    "module.on_train_end", "callback.on_train_end",
    "module.on_fit_end", "callback.on_fit_end",
    "module.teardown(fit)", "callback.teardown(fit)",
]

EXPECTED_VALIDATE = [
    "module.setup(validate)", "callback.setup(validate)",
    "module.on_validation_start", "callback.on_validation_start",
    "module.on_validation_epoch_start", "callback.on_validation_epoch_start",
    "module.on_validation_batch_start(0)", "callback.on_validation_batch_start(0)",
    "module.validation_step(0)",
    "module.on_validation_batch_end(0)", "callback.on_validation_batch_end(0)",
    "module.on_validation_batch_start(1)", "callback.on_validation_batch_start(1)",
    "module.validation_step(1)",
    "module.on_validation_batch_end(1)", "callback.on_validation_batch_end(1)",
    "module.on_validation_epoch_end", "callback.on_validation_epoch_end",
    "module.on_validation_end", "callback.on_validation_end",
    "module.teardown(validate)", "callback.teardown(validate)",
]

EXPECTED_TEST = [
    "module.setup(test)", "callback.setup(test)",
    "module.on_test_start", "callback.on_test_start",
    "module.on_test_epoch_start", "callback.on_test_epoch_start",
    "module.on_test_batch_start(0)", "callback.on_test_batch_start(0)",
    "module.test_step(0)",
    "module.on_test_batch_end(0)", "callback.on_test_batch_end(0)",
    "module.on_test_epoch_end", "callback.on_test_epoch_end",
    "module.on_test_end", "callback.on_test_end",
    "module.teardown(test)", "callback.teardown(test)",
]

EXPECTED_PREDICT = [
    "module.setup(predict)", "callback.setup(predict)",
    "module.on_predict_start", "callback.on_predict_start",
    "module.on_predict_epoch_start", "callback.on_predict_epoch_start",
    "module.on_predict_batch_start(0)", "callback.on_predict_batch_start(0)",
    "module.predict_step(0)",
    "module.on_predict_batch_end(0)", "callback.on_predict_batch_end(0)",
    "module.on_predict_batch_start(1)", "callback.on_predict_batch_start(1)",
    "module.predict_step(1)",
    "module.on_predict_batch_end(1)", "callback.on_predict_batch_end(1)",
    "module.on_predict_epoch_end", "callback.on_predict_epoch_end",
    "module.on_predict_end", "callback.on_predict_end",
    "module.teardown(predict)", "callback.teardown(predict)",
]
# fmt: on


def test_recorders_cover_every_hook():
    """A new hook must be added to the recorders (and to the tables above and in the docs)."""
    for name in CALLBACK_HOOKS:
        assert getattr(Recorder, name) is not getattr(Callback, name), f"Recorder misses {name}"
        base = getattr(TrainModule, name, None)
        if base is not None:
            assert getattr(RecordingModule, name) is not base, f"RecordingModule misses {name}"
    module_methods = [
        n for n, v in vars(TrainModule).items() if callable(v) and not n.startswith("_")
    ]
    not_hooks = {"log", "log_dict", "save_hyperparameters"}
    not_hooks |= {  # manual optimization's API (tests/test_manual_optimization.py)
        "optimizers", "lr_schedulers", "manual_backward", "no_backward_sync", "clip_gradients",
        "toggle_optimizer", "untoggle_optimizer", "toggled_optimizer",
    }
    for name in module_methods:
        if name not in not_hooks:
            assert getattr(RecordingModule, name) is not getattr(TrainModule, name), name


def test_hook_order_fit_validate_test_predict():
    events: list[str] = []
    module, recorder = RecordingModule(events), Recorder(events)
    train, val = _loader(6), _loader(4)  # 3 training batches, 2 validation batches
    trainer = Trainer(accelerator="cpu",
        max_epochs=2,
        limit_train_batches=3,
        accumulate_grad_batches=2,
        num_sanity_val_steps=1,
        limit_val_batches=2,
        callbacks=[recorder],
        **QUIET,
    )
    trainer.fit(module, train, val)
    assert events == EXPECTED_FIT
    assert trainer.global_step == 4  # two windows per epoch: [0, 1] and [2]
    # Epoch metrics are aggregated between the module's and the callbacks' on_train_epoch_end.
    assert module.seen_at_epoch_end == [False, True]  # epoch 1 sees epoch 0's aggregate
    assert recorder.seen_at_epoch_end == [True, True]

    events.clear()
    trainer.validate(module, val)
    assert events == EXPECTED_VALIDATE

    events.clear()
    module.seen_at_epoch_end.clear()
    recorder.seen_at_epoch_end.clear()
    trainer.test(module, _loader(2))
    assert events == EXPECTED_TEST
    assert module.seen_at_epoch_end == [False] and recorder.seen_at_epoch_end == [True]

    events.clear()
    out = trainer.predict(module, _loader(4))
    assert events == EXPECTED_PREDICT
    assert [tuple(o.shape) for o in out] == [(2, 1), (2, 1)]


def test_epoch_metrics_reach_callbacks_but_not_the_module_hook():
    events: list[str] = []
    module, recorder = RecordingModule(events), Recorder(events)
    trainer = Trainer(accelerator="cpu", max_epochs=1, callbacks=[recorder], **QUIET)
    trainer.fit(module, _loader(4))
    assert module.seen_at_epoch_end == [False]
    assert recorder.seen_at_epoch_end == [True]


def test_exception_in_training_step_calls_on_exception_then_teardown_and_reraises():
    events: list[str] = []
    module, recorder = RecordingModule(events, fail_at=1), Recorder(events)
    trainer = Trainer(accelerator="cpu", max_epochs=2, num_sanity_val_steps=0, callbacks=[recorder], **QUIET)
    with pytest.raises(RuntimeError, match="boom") as info:
        trainer.fit(module, _loader(6))
    assert recorder.exception is info.value
    # fmt: off
    assert events == [
        "module.prepare_data",
        "module.setup(fit)", "callback.setup(fit)",
        "module.val_dataloader",  # no val loader passed to fit: the module is asked (returns None)
        "module.configure_optimizers",
        "module.on_fit_start", "callback.on_fit_start",
        "module.on_train_start", "callback.on_train_start",
        "module.on_train_epoch_start", "callback.on_train_epoch_start",
        "module.on_train_batch_start(0)", "callback.on_train_batch_start(0)",
        "module.training_step(0)",
        "module.on_before_backward", "callback.on_before_backward",
        "module.on_after_backward", "callback.on_after_backward",
        "module.on_before_optimizer_step", "callback.on_before_optimizer_step",
        "module.on_before_zero_grad", "callback.on_before_zero_grad",
        "module.on_train_batch_end(0)", "callback.on_train_batch_end(0)",
        "module.on_train_batch_start(1)", "callback.on_train_batch_start(1)",
        "module.training_step(1)",
        "callback.on_exception(RuntimeError)",
        "module.teardown(fit)", "callback.teardown(fit)",
    ]
    # fmt: on
    assert trainer.state.stage is None


class OnlyBatchEnd(Callback):
    """Overrides one hook; every other hook is an instance attribute that fails if called."""

    def __init__(self) -> None:
        self.calls = 0
        for name in CALLBACK_HOOKS:
            if name != "on_train_batch_end":
                setattr(self, name, self._fail(name))

    @staticmethod
    def _fail(name: str) -> Any:
        def fail(*args: Any) -> None:
            raise AssertionError(f"{name} is not overridden and must not be called")

        return fail

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.calls += 1


class PlainModule(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        pass

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_the_hook_table_names_every_callback_hook():
    defined = {n for n in vars(Callback) if n.startswith("on_") or n in ("setup", "teardown")}
    assert set(CALLBACK_HOOKS) == defined
    assert len(CALLBACK_HOOKS) == len(set(CALLBACK_HOOKS))


def test_only_overridden_hooks_are_dispatched():
    cb, plain = OnlyBatchEnd(), Callback()
    module = PlainModule()
    trainer = Trainer(accelerator="cpu", max_epochs=2, callbacks=[cb, plain], **QUIET)
    table = HookDispatcher(trainer, module, [cb, plain], Callback)
    assert {n for n in CALLBACK_HOOKS if table._callbacks[n]} == {"on_train_batch_end"}
    assert len(table._callbacks["on_train_batch_end"]) == 1  # `plain` overrides nothing
    assert not any(table._module[n] for n in CALLBACK_HOOKS)  # PlainModule overrides no hook

    trainer.fit(module, _loader(6), _loader(4))  # any other hook called on `cb` would raise
    assert cb.calls == 2 * 3
    trainer.validate(module, _loader(4))
    assert cb.calls == 2 * 3
