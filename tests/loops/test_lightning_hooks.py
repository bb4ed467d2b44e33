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

from typing import Any

import pytest
import torch
from torch import nn

from callbacks.callback import Callback
from tests.helpers.models import QUIET
from tests.helpers.optional import importorskip
from tests.loops.hook_module import FIT, HookBody, fit_hook_module, hook_loader
from trainer import Trainer, TrainModule

pl = importorskip("lightning.pytorch", reason="Lightning 2.x (the `dev` extra) is not installed: nothing to compare with")


def _callback_body(events: list[Any]) -> dict[str, Any]:
    def batch_end(self, trainer, module, outputs, batch, batch_idx):  # no dataloader_idx: one loader
        events.append(("callback.on_validation_batch_end", batch_idx))

    return {"on_validation_batch_end": batch_end}


def _run(framework: str, tmp_path, **extra: Any) -> tuple[dict[str, list[Any]], list[torch.Tensor]]:
    events: list[Any] = []
    if framework == "lightning":
        callback = type("C", (pl.Callback,), _callback_body(events))()
        module = type("M", (HookBody, pl.LightningModule), {})(events, callback)
        trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                             enable_checkpointing=False, enable_model_summary=False,
                             default_root_dir=tmp_path, **FIT, **extra)
    else:
        callback = type("C", (Callback,), _callback_body(events))()
        module = type("M", (HookBody, TrainModule), {})(events, callback)
        trainer = Trainer(accelerator="cpu", default_root_dir=tmp_path, **QUIET, **FIT, **extra)
    out = {}
    for stage, call in [
        ("fit", lambda: trainer.fit(module, hook_loader(8), hook_loader(4, seed=1))),
        ("validate", lambda: trainer.validate(module, hook_loader(4, seed=1))),
        ("test", lambda: trainer.test(module, hook_loader(2, seed=2))),
        ("predict", lambda: trainer.predict(module, hook_loader(4, seed=3))),
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


# -- the overridden optimizer_step and configure_gradient_clipping under "bf16-mixed" ------------
@pytest.fixture(scope="module")
def bf16_runs(tmp_path_factory):
    return {fw: _run(fw, tmp_path_factory.mktemp(f"bf16-{fw}"), precision="bf16-mixed") for fw in ("lightning", "lockstep")}


def test_under_bf16_mixed_the_overrides_run_as_in_lightning(bf16_runs, runs):
    (theirs, their_params), (ours, our_params) = bf16_runs["lightning"], bf16_runs["lockstep"]
    assert ours["fit"] == theirs["fit"]  # every call, its arguments (losses, gradient norms to 1e-5) and order
    assert ours["fit.end"] == theirs["fit.end"] == [2, 4]
    for a, b in zip(their_params, our_params):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-6)
    # the precision took effect: the parameters are not those of the 32-true run
    assert max((a - b).abs().max().item() for a, b in zip(our_params, runs["lockstep"][1])) > 1e-5
    assert sum(e[0] == "configure_gradient_clipping" for e in ours["fit"]) == 4


# -- every hook of Lightning's LightningModule: called, or refused at fit start ------------------
def _lightning_hooks() -> list[str]:
    from lightning.pytorch.core.hooks import CheckpointHooks, DataHooks, ModelHooks

    return sorted(
        n for cls in (ModelHooks, DataHooks, CheckpointHooks) for n, v in vars(cls).items()
        if not n.startswith("_") and callable(v)
    )


def test_every_lightning_hook_is_called_or_refused(runs):
    from trainer.lightning.unsupported import REFUSED_MODULE_HOOKS
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


@pytest.mark.parametrize("name", sorted(__import__("trainer.lightning.unsupported", fromlist=["x"]).REFUSED_MODULE_HOOKS))
def test_an_unsupported_override_is_refused_at_fit_start_naming_it(name, tmp_path):
    def hook(self, *args, **kwargs):
        raise AssertionError("must not run")

    module = type("WithHook", (HookBody, TrainModule), {name: hook})([], Callback())
    trainer = Trainer(accelerator="cpu", max_epochs=1, default_root_dir=tmp_path, **QUIET)
    with pytest.raises(NotImplementedError, match=rf"WithHook\.{name}"):
        trainer.fit(module, hook_loader(4))


def test_lightning_module_attributes_are_all_known():
    """Every public attribute of Lightning's LightningModule exists on TrainModule or is listed, with
    what to use instead, in trainer.lightning.unsupported (and docs/migration.md)."""
    from trainer.lightning.unsupported import REFUSED_MODULE_HOOKS, UNSUPPORTED_MODULE_ATTRIBUTES

    names = {n for cls in pl.LightningModule.__mro__ if cls not in (nn.Module, object)
             for n in vars(cls) if not n.startswith("_")}
    unknown = sorted(n for n in names if not hasattr(TrainModule, n)
                     and n not in REFUSED_MODULE_HOOKS and n not in UNSUPPORTED_MODULE_ATTRIBUTES)
    assert not unknown, unknown


def test_strict_loading_false_is_refused(tmp_path):
    module = type("M", (HookBody, TrainModule), {})([], Callback())
    module.strict_loading = False
    with pytest.raises(NotImplementedError, match=r"M\.strict_loading = False .*load_from_checkpoint\(strict=False\)"):
        Trainer(accelerator="cpu", max_epochs=1, default_root_dir=tmp_path, **QUIET).fit(module, hook_loader(4))


# -- the same module on 2 ranks: the closure under DDP's no_sync, the same numbers ------------
def _hook_module_on_rank(rank: int, world_size: int, root: str) -> dict[str, Any]:
    return fit_hook_module(root, batch_size=1, devices=2, strategy="ddp")


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_the_hook_module_on_two_ranks_equals_one_process_with_the_global_batch(tmp_path):
    from tests.helpers.distributed import run_ranks

    want = fit_hook_module(str(tmp_path / "one"), batch_size=2)
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
