"""Every module hook Lightning calls, called by Lockstep with the same arguments, in the same order.

One module class body, put on Lightning's ``LightningModule`` and on Lockstep's ``TrainModule``,
overrides the optimization hooks (``optimizer_step`` with a learning-rate warm-up that calls
``optimizer.step(closure=...)``, ``optimizer_zero_grad``, ``lr_scheduler_step``,
``configure_gradient_clipping``, ``backward``), the batch-transfer hooks, the
``*_model_eval``/``*_model_train`` hooks and ``configure_callbacks``, and records every call with
its arguments. Both frameworks run fit (accumulation 2 over 4 batches, clipping by norm, a
step-interval scheduler, ``min_epochs`` > ``max_epochs`` against a ``should_stop`` after the first
epoch), validate, test and predict: the records must be equal, and so must the final parameters
(1e-6, one process, 32-true). Then the hook list of the installed Lightning is walked: every hook
is either called (this test saw it) or refused at fit start by name.
"""
from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from callbacks.callback import Callback
from tests.helpers.models import QUIET
from trainer import Trainer, TrainModule

pl = pytest.importorskip("lightning.pytorch", reason="Lightning 2.x (the `dev` extra) is not installed: nothing to compare with")

FIT = dict(max_epochs=2, min_epochs=3, accumulate_grad_batches=2, gradient_clip_val=0.05,
           gradient_clip_algorithm="norm", limit_val_batches=2, num_sanity_val_steps=1)


def _data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True) + 0.1 * torch.randn(n, 1, generator=g))


def _loader(n: int, seed: int = 0) -> DataLoader:
    return DataLoader(_data(n, seed), batch_size=2)


def _arg(value: Any) -> Any:
    """A framework-neutral record of a hook argument."""
    if isinstance(value, torch.Tensor):
        return round(float(value.detach()), 5) if value.numel() == 1 else tuple(value.shape)
    if isinstance(value, torch.optim.Optimizer) or hasattr(value, "param_groups"):
        return "optimizer"
    if isinstance(value, torch.optim.lr_scheduler.LRScheduler):
        return "scheduler"
    if isinstance(value, torch.device):
        return value.type
    if isinstance(value, (list, tuple)):
        return tuple(_arg(v) for v in value)
    if callable(value):
        return "closure"
    return getattr(value, "value", value)  # Lightning passes its clip algorithm as a str enum


class _Body:
    """The shared class body; the framework's base class comes second in the bases."""

    def __init__(self, events: list[Any], callback: Any) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        self.events = events
        self.callback = callback

    def rec(self, name: str, *args: Any) -> None:
        self.events.append((name, *(_arg(a) for a in args)))

    def forward(self, x):
        return self.net(x)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.8)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def configure_callbacks(self):
        self.rec("configure_callbacks")
        return [self.callback]

    def training_step(self, batch, batch_idx):
        self.rec("training_step", batch_idx)
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def validation_step(self, batch, batch_idx):
        self.rec("validation_step", batch_idx, self.training)
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y))

    def test_step(self, batch, batch_idx):
        self.rec("test_step", batch_idx, self.training)
        x, y = batch
        self.log("test_loss", nn.functional.mse_loss(self(x), y))

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        self.rec("predict_step", batch_idx, self.training)
        return self(batch[0])

    # the optimization step
    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        self.rec("optimizer_step", epoch, batch_idx, optimizer, optimizer_closure)
        if self.trainer.global_step < 2:  # a warm-up, as real projects write it
            for group in optimizer.param_groups:
                group["lr"] = 0.1 * (self.trainer.global_step + 1) / 2
        loss = optimizer.step(closure=optimizer_closure)
        self.rec("closure returned", loss)

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        self.rec("optimizer_zero_grad", epoch, batch_idx, optimizer)
        optimizer.zero_grad()

    def lr_scheduler_step(self, scheduler, metric):
        self.rec("lr_scheduler_step", scheduler, metric)
        scheduler.step()

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        self.rec("configure_gradient_clipping", optimizer, gradient_clip_val, gradient_clip_algorithm)
        self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm=gradient_clip_algorithm)

    def backward(self, loss, *args, **kwargs):
        self.rec("backward", loss)
        loss.backward(*args, **kwargs)

    def on_before_backward(self, loss):
        self.rec("on_before_backward", loss)

    def on_after_backward(self):
        self.rec("on_after_backward", self.net[0].weight.grad.norm())

    def on_before_optimizer_step(self, optimizer):
        self.rec("on_before_optimizer_step", optimizer)

    def on_before_zero_grad(self, optimizer):
        self.rec("on_before_zero_grad", optimizer)

    def on_train_epoch_end(self):
        self.rec("on_train_epoch_end", self.current_epoch)
        self.trainer.should_stop = True  # min_epochs=3 keeps training: max_epochs=2 ends it

    # batches
    def on_before_batch_transfer(self, batch, dataloader_idx):
        self.rec("on_before_batch_transfer", dataloader_idx)
        return batch

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        self.rec("transfer_batch_to_device", device, dataloader_idx)
        return [t.to(device) for t in batch]

    def on_after_batch_transfer(self, batch, dataloader_idx):
        self.rec("on_after_batch_transfer", dataloader_idx)
        x, y = batch
        return [x * 1.0, y]

    # modes
    def on_validation_model_zero_grad(self):
        self.rec("on_validation_model_zero_grad")
        super().on_validation_model_zero_grad()

    def on_validation_model_eval(self):
        self.rec("on_validation_model_eval")
        super().on_validation_model_eval()

    def on_validation_model_train(self):
        self.rec("on_validation_model_train")
        super().on_validation_model_train()

    def on_test_model_eval(self):
        self.rec("on_test_model_eval")
        super().on_test_model_eval()

    def on_test_model_train(self):
        self.rec("on_test_model_train")
        super().on_test_model_train()

    def on_predict_model_eval(self):
        self.rec("on_predict_model_eval")
        super().on_predict_model_eval()


def _callback_body(events: list[Any]) -> dict[str, Any]:
    def batch_end(self, trainer, module, outputs, batch, batch_idx):  # no dataloader_idx: one loader
        events.append(("callback.on_validation_batch_end", batch_idx))

    return {"on_validation_batch_end": batch_end}


def _run(framework: str, tmp_path) -> tuple[dict[str, list[Any]], list[torch.Tensor]]:
    events: list[Any] = []
    if framework == "lightning":
        callback = type("C", (pl.Callback,), _callback_body(events))()
        module = type("M", (_Body, pl.LightningModule), {})(events, callback)
        trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                             enable_checkpointing=False, enable_model_summary=False,
                             default_root_dir=tmp_path, **FIT)
    else:
        callback = type("C", (Callback,), _callback_body(events))()
        module = type("M", (_Body, TrainModule), {})(events, callback)
        trainer = Trainer(accelerator="cpu", default_root_dir=tmp_path, **QUIET, **FIT)
    out = {}
    for stage, call in [
        ("fit", lambda: trainer.fit(module, _loader(8), _loader(4, seed=1))),
        ("validate", lambda: trainer.validate(module, _loader(4, seed=1))),
        ("test", lambda: trainer.test(module, _loader(2, seed=2))),
        ("predict", lambda: trainer.predict(module, _loader(4, seed=3))),
    ]:
        events.clear()
        call()
        out[stage] = list(events)
        if stage == "fit":
            out["fit.end"] = [trainer.current_epoch, trainer.global_step]
    return out, [p.detach().clone() for p in module.parameters()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {fw: _run(fw, tmp_path_factory.mktemp(fw)) for fw in ("lightning", "lockstep")}


@pytest.mark.parametrize("stage", ["fit", "fit.end", "validate", "test", "predict"])
def test_hooks_are_called_as_lightning_calls_them(runs, stage):
    theirs, ours = runs["lightning"][0][stage], runs["lockstep"][0][stage]
    assert ours == theirs


def test_the_module_ends_with_lightnings_parameters(runs):
    theirs, ours = runs["lightning"][1], runs["lockstep"][1]
    for a, b in zip(theirs, ours):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-6)
    fit = runs["lockstep"][0]["fit"]
    # what the comparison covers: the closure ran inside the override, twice per epoch; clipping,
    # the scheduler and the min_epochs continuation happened
    assert sum(e[0] == "optimizer_step" for e in fit) == 4
    assert ("configure_gradient_clipping", "optimizer", 0.05, "norm") in fit
    assert runs["lockstep"][0]["fit.end"] == [2, 4]


# -- every hook of Lightning's LightningModule: called, or refused at fit start ------------------
def _lightning_hooks() -> list[str]:
    from lightning.pytorch.core.hooks import CheckpointHooks, DataHooks, ModelHooks

    return sorted(
        n for cls in (ModelHooks, DataHooks, CheckpointHooks) for n, v in vars(cls).items()
        if not n.startswith("_") and callable(v)
    )


def test_every_lightning_hook_is_called_or_refused(runs):
    from trainer.unsupported import REFUSED_MODULE_HOOKS
    from tests.loops.test_hook_order import EXPECTED_FIT, EXPECTED_PREDICT, EXPECTED_TEST, EXPECTED_VALIDATE

    seen = {e[0] for stage in ("fit", "validate", "test", "predict") for e in runs["lockstep"][0][stage]}
    orders = EXPECTED_FIT + EXPECTED_VALIDATE + EXPECTED_TEST + EXPECTED_PREDICT
    seen |= {e.split(".", 1)[1].split("(")[0] for e in orders if e.startswith("module.")}
    # called in other tests of their own: loaders (tests/data), checkpoints (test_hook_order's
    # test_checkpoint_hooks_order), on_predict_model_train (Lightning defines it but never calls it)
    elsewhere = {"train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader",
                 "on_save_checkpoint", "on_load_checkpoint", "on_predict_model_train"}
    missing = [n for n in _lightning_hooks() if n not in seen | elsewhere | set(REFUSED_MODULE_HOOKS)]
    assert not missing, f"Lightning hooks neither called nor refused: {missing}"


@pytest.mark.parametrize("name", sorted(__import__("trainer.unsupported", fromlist=["x"]).REFUSED_MODULE_HOOKS))
def test_an_unsupported_override_is_refused_at_fit_start_naming_it(name, tmp_path):
    def hook(self, *args, **kwargs):
        raise AssertionError("must not run")

    module = type("WithHook", (_Body, TrainModule), {name: hook})([], Callback())
    trainer = Trainer(accelerator="cpu", max_epochs=1, default_root_dir=tmp_path, **QUIET)
    with pytest.raises(NotImplementedError, match=rf"WithHook\.{name}"):
        trainer.fit(module, _loader(4))


def test_lightning_module_attributes_are_all_known():
    """Every public attribute of Lightning's LightningModule exists on TrainModule or is listed, with
    what to use instead, in trainer.unsupported (and docs/migration.md)."""
    from trainer.unsupported import REFUSED_MODULE_HOOKS, UNSUPPORTED_MODULE_ATTRIBUTES

    names = {n for cls in pl.LightningModule.__mro__ if cls not in (nn.Module, object)
             for n in vars(cls) if not n.startswith("_")}
    unknown = sorted(n for n in names if not hasattr(TrainModule, n)
                     and n not in REFUSED_MODULE_HOOKS and n not in UNSUPPORTED_MODULE_ATTRIBUTES)
    assert not unknown, unknown


def test_strict_loading_false_is_refused(tmp_path):
    module = type("M", (_Body, TrainModule), {})([], Callback())
    module.strict_loading = False
    with pytest.raises(NotImplementedError, match=r"M\.strict_loading = False .*load_from_checkpoint\(strict=False\)"):
        Trainer(accelerator="cpu", max_epochs=1, default_root_dir=tmp_path, **QUIET).fit(module, _loader(4))


# -- the same module on 2 ranks: the closure under DDP's no_sync, the same numbers ------------
def _fit_hook_module(root: str, batch_size: int, **kwargs: Any) -> dict[str, Any]:
    events: list[Any] = []
    module = type("M", (_Body, TrainModule), {})(events, type("C", (Callback,), {})())
    trainer = Trainer(accelerator="cpu", default_root_dir=root, **QUIET, **FIT, **kwargs)
    trainer.fit(module, DataLoader(_data(8, 0), batch_size=batch_size), DataLoader(_data(4, 1), batch_size=batch_size))
    return {"params": [p.detach().clone() for p in module.parameters()], "global_step": trainer.global_step,
            "steps": sum(e[0] == "optimizer_step" for e in events)}


def _hook_module_on_rank(rank: int, world_size: int, root: str) -> dict[str, Any]:
    return _fit_hook_module(root, batch_size=1, devices=2, strategy="ddp")


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_the_hook_module_on_two_ranks_equals_one_process_with_the_global_batch(tmp_path):
    from tests.helpers.distributed import run_ranks

    want = _fit_hook_module(str(tmp_path / "one"), batch_size=2)
    for got in run_ranks(_hook_module_on_rank, args=(str(tmp_path / "two"),), init_group=False, timeout=150):
        assert got["global_step"] == want["global_step"] == got["steps"] == 4
        for a, b in zip(got["params"], want["params"]):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_lightning_datamodule_attributes_are_all_known():
    from trainer import DataModule

    names = {n for cls in pl.LightningDataModule.__mro__ if cls is not object for n in vars(cls) if not n.startswith("_")}
    # the hyperparameter-key constants and Lightning's ignore helper (`save_hyperparameters(ignore=)` here)
    internal = {"CHECKPOINT_HYPER_PARAMS_KEY", "CHECKPOINT_HYPER_PARAMS_NAME", "CHECKPOINT_HYPER_PARAMS_TYPE",
                "remove_ignored_hparams"}
    assert sorted(n for n in names if not hasattr(DataModule, n) and n not in internal) == []
