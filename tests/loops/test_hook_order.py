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

from callbacks.accumulation_scheduler import GradientAccumulationScheduler
from callbacks.callback import Callback
from callbacks.early_stopping import EarlyStopping
from tests.helpers.models import QUIET
from tests.helpers.optional import importorskip
from trainer import Trainer, TrainModule
from trainer.hooks import CALLBACK_HOOKS, MODULE_ONLY_HOOKS, HookDispatcher


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

    def configure_model(self) -> None:
        self._rec("configure_model")

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
    "callback.setup(fit)", "module.setup(fit)",
    "module.configure_model",  # once per module object: not in the validate/test/predict after fit
    "module.configure_optimizers",
    "callback.on_fit_start", "module.on_fit_start",
    # sanity check: num_sanity_val_steps=1 batch
    "callback.on_sanity_check_start",
    "callback.on_validation_start", "module.on_validation_start",
    "callback.on_validation_epoch_start", "module.on_validation_epoch_start",
    "callback.on_validation_batch_start(0)", "module.on_validation_batch_start(0)",
    "module.validation_step(0)",
    "callback.on_validation_batch_end(0)", "module.on_validation_batch_end(0)",
    "callback.on_validation_epoch_end", "module.on_validation_epoch_end",
    "callback.on_validation_end", "module.on_validation_end",
    "callback.on_sanity_check_end",
    "callback.on_train_start", "module.on_train_start",
    # epoch 0: batches 0-1 are one window, batch 2 is the shorter last window
    "callback.on_train_epoch_start", "module.on_train_epoch_start",
    "callback.on_train_batch_start(0)", "module.on_train_batch_start(0)",
    "module.training_step(0)",
    "callback.on_before_zero_grad", "module.on_before_zero_grad",
    "callback.on_before_backward", "module.on_before_backward",
    "callback.on_after_backward", "module.on_after_backward",
    "callback.on_train_batch_end(0)", "module.on_train_batch_end(0)",
    "callback.on_train_batch_start(1)", "module.on_train_batch_start(1)",
    "module.training_step(1)",
    "callback.on_before_backward", "module.on_before_backward",
    "callback.on_after_backward", "module.on_after_backward",
    "callback.on_before_optimizer_step", "module.on_before_optimizer_step",
    "callback.on_train_batch_end(1)", "module.on_train_batch_end(1)",
    "callback.on_train_batch_start(2)", "module.on_train_batch_start(2)",
    "module.training_step(2)",
    "callback.on_before_zero_grad", "module.on_before_zero_grad",
    "callback.on_before_backward", "module.on_before_backward",
    "callback.on_after_backward", "module.on_after_backward",
    "callback.on_before_optimizer_step", "module.on_before_optimizer_step",
    "callback.on_train_batch_end(2)", "module.on_train_batch_end(2)",
    # validation at the epoch's end (limit_val_batches=2)
    "callback.on_validation_start", "module.on_validation_start",
    "callback.on_validation_epoch_start", "module.on_validation_epoch_start",
    "callback.on_validation_batch_start(0)", "module.on_validation_batch_start(0)",
    "module.validation_step(0)",
    "callback.on_validation_batch_end(0)", "module.on_validation_batch_end(0)",
    "callback.on_validation_batch_start(1)", "module.on_validation_batch_start(1)",
    "module.validation_step(1)",
    "callback.on_validation_batch_end(1)", "module.on_validation_batch_end(1)",
    "callback.on_validation_epoch_end", "module.on_validation_epoch_end",
    "callback.on_validation_end", "module.on_validation_end",
    "callback.on_train_epoch_end", "module.on_train_epoch_end",
    # epoch 1: the same
    "callback.on_train_epoch_start", "module.on_train_epoch_start",
    "callback.on_train_batch_start(0)", "module.on_train_batch_start(0)",
    "module.training_step(0)",
    "callback.on_before_zero_grad", "module.on_before_zero_grad",
    "callback.on_before_backward", "module.on_before_backward",
    "callback.on_after_backward", "module.on_after_backward",
    "callback.on_train_batch_end(0)", "module.on_train_batch_end(0)",
    "callback.on_train_batch_start(1)", "module.on_train_batch_start(1)",
    "module.training_step(1)",
    "callback.on_before_backward", "module.on_before_backward",
    "callback.on_after_backward", "module.on_after_backward",
    "callback.on_before_optimizer_step", "module.on_before_optimizer_step",
    "callback.on_train_batch_end(1)", "module.on_train_batch_end(1)",
    "callback.on_train_batch_start(2)", "module.on_train_batch_start(2)",
    "module.training_step(2)",
    "callback.on_before_zero_grad", "module.on_before_zero_grad",
    "callback.on_before_backward", "module.on_before_backward",
    "callback.on_after_backward", "module.on_after_backward",
    "callback.on_before_optimizer_step", "module.on_before_optimizer_step",
    "callback.on_train_batch_end(2)", "module.on_train_batch_end(2)",
    "callback.on_validation_start", "module.on_validation_start",
    "callback.on_validation_epoch_start", "module.on_validation_epoch_start",
    "callback.on_validation_batch_start(0)", "module.on_validation_batch_start(0)",
    "module.validation_step(0)",
    "callback.on_validation_batch_end(0)", "module.on_validation_batch_end(0)",
    "callback.on_validation_batch_start(1)", "module.on_validation_batch_start(1)",
    "module.validation_step(1)",
    "callback.on_validation_batch_end(1)", "module.on_validation_batch_end(1)",
    "callback.on_validation_epoch_end", "module.on_validation_epoch_end",
    "callback.on_validation_end", "module.on_validation_end",
    "callback.on_train_epoch_end", "module.on_train_epoch_end",
    "callback.on_train_end", "module.on_train_end",
    "callback.on_fit_end", "module.on_fit_end",
    "callback.teardown(fit)", "module.teardown(fit)",
]

EXPECTED_VALIDATE = [
    "module.prepare_data",
    "callback.setup(validate)", "module.setup(validate)",
    "callback.on_validation_start", "module.on_validation_start",
    "callback.on_validation_epoch_start", "module.on_validation_epoch_start",
    "callback.on_validation_batch_start(0)", "module.on_validation_batch_start(0)",
    "module.validation_step(0)",
    "callback.on_validation_batch_end(0)", "module.on_validation_batch_end(0)",
    "callback.on_validation_batch_start(1)", "module.on_validation_batch_start(1)",
    "module.validation_step(1)",
    "callback.on_validation_batch_end(1)", "module.on_validation_batch_end(1)",
    "callback.on_validation_epoch_end", "module.on_validation_epoch_end",
    "callback.on_validation_end", "module.on_validation_end",
    "callback.teardown(validate)", "module.teardown(validate)",
]

EXPECTED_TEST = [
    "module.prepare_data",
    "callback.setup(test)", "module.setup(test)",
    "callback.on_test_start", "module.on_test_start",
    "callback.on_test_epoch_start", "module.on_test_epoch_start",
    "callback.on_test_batch_start(0)", "module.on_test_batch_start(0)",
    "module.test_step(0)",
    "callback.on_test_batch_end(0)", "module.on_test_batch_end(0)",
    "callback.on_test_epoch_end", "module.on_test_epoch_end",
    "callback.on_test_end", "module.on_test_end",
    "callback.teardown(test)", "module.teardown(test)",
]

EXPECTED_PREDICT = [
    "module.prepare_data",
    "callback.setup(predict)", "module.setup(predict)",
    "callback.on_predict_start", "module.on_predict_start",
    "callback.on_predict_epoch_start", "module.on_predict_epoch_start",
    "callback.on_predict_batch_start(0)", "module.on_predict_batch_start(0)",
    "module.predict_step(0)",
    "callback.on_predict_batch_end(0)", "module.on_predict_batch_end(0)",
    "callback.on_predict_batch_start(1)", "module.on_predict_batch_start(1)",
    "module.predict_step(1)",
    "callback.on_predict_batch_end(1)", "module.on_predict_batch_end(1)",
    "callback.on_predict_epoch_end", "module.on_predict_epoch_end",
    "callback.on_predict_end", "module.on_predict_end",
    "callback.teardown(predict)", "module.teardown(predict)",
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
    not_hooks = {"log", "log_dict", "save_hyperparameters", "print"}
    not_hooks |= {  # manual optimization's API (tests/test_manual_optimization.py)
        "optimizers", "lr_schedulers", "manual_backward", "no_backward_sync", "clip_gradients",
        "toggle_optimizer", "untoggle_optimizer", "toggled_optimizer",
    }
    not_hooks |= {"freeze", "unfreeze", "all_gather", "to_torchscript", "to_onnx"}  # the module's API
    # module-only hooks with Lightning's defaults: their calls, arguments and order are compared
    # with Lightning's in tests/loops/test_lightning_hooks.py
    not_hooks |= set(MODULE_ONLY_HOOKS)
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
    # Epoch metrics are aggregated before the epoch-end hooks: the module's sees them too.
    assert module.seen_at_epoch_end == [True, True]
    assert recorder.seen_at_epoch_end == [True, True]

    events.clear()
    trainer.validate(module, val)
    assert events == EXPECTED_VALIDATE

    events.clear()
    module.seen_at_epoch_end.clear()
    recorder.seen_at_epoch_end.clear()
    trainer.test(module, _loader(2))
    assert events == EXPECTED_TEST
    assert module.seen_at_epoch_end == [True] and recorder.seen_at_epoch_end == [True]

    events.clear()
    out = trainer.predict(module, _loader(4))
    assert events == EXPECTED_PREDICT
    assert [tuple(o.shape) for o in out] == [(2, 1), (2, 1)]


def test_epoch_metrics_reach_callbacks_and_the_module_hook():
    events: list[str] = []
    module, recorder = RecordingModule(events), Recorder(events)
    trainer = Trainer(accelerator="cpu", max_epochs=1, callbacks=[recorder], **QUIET)
    trainer.fit(module, _loader(4))
    assert module.seen_at_epoch_end == [True]  # before: [False] (aggregated after the module's hook)
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
        "callback.setup(fit)", "module.setup(fit)",
        "module.configure_model",
        "module.val_dataloader",  # no val loader passed to fit: the module is asked (returns None)
        "module.configure_optimizers",
        "callback.on_fit_start", "module.on_fit_start",
        "callback.on_train_start", "module.on_train_start",
        "callback.on_train_epoch_start", "module.on_train_epoch_start",
        "callback.on_train_batch_start(0)", "module.on_train_batch_start(0)",
        "module.training_step(0)",
        "callback.on_before_zero_grad", "module.on_before_zero_grad",
        "callback.on_before_backward", "module.on_before_backward",
        "callback.on_after_backward", "module.on_after_backward",
        "callback.on_before_optimizer_step", "module.on_before_optimizer_step",
        "callback.on_train_batch_end(0)", "module.on_train_batch_end(0)",
        "callback.on_train_batch_start(1)", "module.on_train_batch_start(1)",
        "module.training_step(1)",
        "callback.on_exception(RuntimeError)",
        "callback.teardown(fit)", "module.teardown(fit)",
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


# -- Lightning 2.x's order -------------------------------------------------------------------
class MetricMonitor(EarlyStopping):
    """A metric monitor (runs its on_train_epoch_end after the module's) that records what it saw."""

    def __init__(self, events: list[str]) -> None:
        super().__init__(monitor="module_epoch_value", patience=100)
        self.events = events

    def on_train_epoch_end(self, trainer, module):
        self.events.append("monitor.on_train_epoch_end")
        self.events.append(f"monitor saw {float(trainer.callback_metrics['module_epoch_value'])}")
        super().on_train_epoch_end(trainer, module)


class LogsAtEpochEnd(RecordingModule):
    def on_train_epoch_start(self) -> None:
        self._rec("on_train_epoch_start", self.trainer.accumulate_grad_batches)

    def on_train_epoch_end(self) -> None:
        super().on_train_epoch_end()
        self.log("module_epoch_value", float(self.current_epoch + 1))


def test_metric_monitors_run_after_the_module_epoch_end_and_module_sees_the_accumulation_scheduler():
    """Lightning's order: callbacks, module, then monitoring callbacks (they see the module's logs).

    Before: the module ran first and on_train_epoch_start saw the accumulation of the previous
    epoch (1, 1 here instead of 1, 2).
    """
    events: list[str] = []
    module = LogsAtEpochEnd(events)
    callbacks = [MetricMonitor(events), Recorder(events), GradientAccumulationScheduler({1: 2})]
    trainer = Trainer(accelerator="cpu", max_epochs=2, num_sanity_val_steps=0, callbacks=callbacks, **QUIET)
    trainer.fit(module, _loader(4))
    epoch_starts = [e for e in events if "on_train_epoch_start" in e]
    assert epoch_starts == [
        "callback.on_train_epoch_start", "module.on_train_epoch_start(1)",
        "callback.on_train_epoch_start", "module.on_train_epoch_start(2)",
    ]
    epoch_ends = [e for e in events if "epoch_end" in e or e.startswith("monitor")]
    assert epoch_ends == [
        "callback.on_train_epoch_end", "module.on_train_epoch_end",
        "monitor.on_train_epoch_end", "monitor saw 1.0",
    ] * 1 + [
        "callback.on_train_epoch_end", "module.on_train_epoch_end",
        "monitor.on_train_epoch_end", "monitor saw 2.0",
    ]


def test_checkpoint_hooks_order(tmp_path):
    """Saving: callbacks then the module (as Lightning); loading: the module (with its weights) first."""
    events: list[str] = []
    module, recorder = RecordingModule(events), Recorder(events)
    trainer = Trainer(accelerator="cpu", max_epochs=1, num_sanity_val_steps=0, callbacks=[recorder], **QUIET)
    trainer.fit(module, _loader(4))
    events.clear()
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    assert events == ["callback.on_save_checkpoint", "module.on_save_checkpoint"]
    events.clear()
    trainer = Trainer(accelerator="cpu", max_epochs=2, num_sanity_val_steps=0, callbacks=[recorder], **QUIET)
    trainer.fit(module, _loader(4), ckpt_path=tmp_path / "a.ckpt")
    loads = [e for e in events if "load_checkpoint" in e]
    assert loads == ["module.on_load_checkpoint", "callback.on_load_checkpoint"]





def _lightning_recording_run(tmp_path) -> dict[str, list[str]]:
    import lightning.pytorch as pl

    events: list[str] = []
    common = [n for n in CALLBACK_HOOKS if hasattr(pl.Callback, n)]
    module_hooks = [n for n in common if hasattr(TrainModule, n) and hasattr(pl.LightningModule, n)]

    def module_hook(name):
        def hook(self, *args, **kwargs):
            events.append(f"module.{name}")

        return hook

    def callback_hook(name):
        def hook(self, trainer, pl_module, *args, **kwargs):
            events.append(f"callback.{name}")

        return hook

    def make(module_base, callback_base):
        body = {name: module_hook(name) for name in [*module_hooks, "prepare_data"]}
        return (
            type("M", (_TinySteps, module_base), body),
            type("C", (callback_base,), {name: callback_hook(name) for name in common}),
        )

    out: dict[str, list[str]] = {}
    fit_kwargs = dict(max_epochs=2, limit_train_batches=3, accumulate_grad_batches=2,
                      num_sanity_val_steps=1, limit_val_batches=2)
    for framework in ("lockstep", "lightning"):
        if framework == "lightning":
            M, C = make(pl.LightningModule, pl.Callback)
            trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                                 enable_checkpointing=False, enable_model_summary=False,
                                 default_root_dir=tmp_path, callbacks=[C()], **fit_kwargs)
        else:
            M, C = make(TrainModule, Callback)
            trainer = Trainer(accelerator="cpu", callbacks=[C()], default_root_dir=tmp_path, **QUIET, **fit_kwargs)
        module = M(events)
        for stage, run in [
            ("fit", lambda: trainer.fit(module, _loader(6), _loader(4))),
            ("validate", lambda: trainer.validate(module, _loader(4))),
            ("test", lambda: trainer.test(module, _loader(2))),
            ("predict", lambda: trainer.predict(module, _loader(4))),
        ]:
            events.clear()
            run()
            out[f"{framework}.{stage}"] = list(events)
    return out


class _TinySteps:
    """The same steps on both frameworks' module base."""

    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.net = nn.Linear(2, 1)
        self.events = events

    def forward(self, x):
        return self.net(x)

    def configure_optimizers(self):
        self.events.append("module.configure_optimizers")
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def training_step(self, batch, batch_idx):
        self.events.append(f"module.training_step({batch_idx})")
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def validation_step(self, batch, batch_idx):
        self.events.append(f"module.validation_step({batch_idx})")
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y))

    def test_step(self, batch, batch_idx):
        self.events.append(f"module.test_step({batch_idx})")
        x, y = batch
        self.log("test_loss", nn.functional.mse_loss(self(x), y))

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        self.events.append(f"module.predict_step({batch_idx})")
        return self(batch[0])


def test_hook_order_matches_lightning(tmp_path):
    """The same tiny module and callback on Lockstep and on Lightning record the same hook sequence.

    Needs the ``lightning`` package (the ``bench`` extra). ``on_before_zero_grad`` included: a
    callback that implements it sees it where Lightning calls it (automatic.py's docstring).
    """
    importorskip("lightning", reason="Lightning 2.x (the `dev` extra) is not installed: nothing to compare with")
    runs = _lightning_recording_run(tmp_path)
    for stage in ("fit", "validate", "test", "predict"):
        ours, theirs = runs[f"lockstep.{stage}"], runs[f"lightning.{stage}"]
        assert ours == theirs, stage
    assert runs["lockstep.fit"].count("module.on_before_zero_grad") == 4  # 2 windows x 2 epochs
    # ours: the training part of EXPECTED_FIT, whose pairs are (callback, module) as Lightning's
    assert [e for e in runs["lockstep.fit"] if "(" not in e or "step(" in e][:3] == [
        "module.prepare_data", "callback.setup", "module.setup"]
