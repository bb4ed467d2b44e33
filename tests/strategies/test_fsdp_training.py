"""FSDPStrategy trains as exactly as DDP: FSDP(W=2, micro batch b, accumulation A) ends with the
parameters of one process with batch 2*b*A. One 2-rank job runs every scenario (module-scoped
fixture); each test compares one of them with its one-process reference."""
from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from callbacks import Callback
from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET, Regression, assert_params_close, loader, params_of, regression_data
from tests.helpers.session_cache import once_per_session
from tests.strategies import fsdp_models as fm
from trainer import FSDPStrategy, Trainer

pytest.importorskip("torch.distributed.fsdp", reason="FSDP2 needs torch.distributed")
if not hasattr(torch.distributed.fsdp, "fully_shard"):
    pytest.skip("FSDP2 (fully_shard) needs torch >= 2.6", allow_module_level=True)

B, A = 4, 2  # micro batch per rank, accumulation


class Grab(Callback):
    """The full parameters at the end of training (while the process group still exists)."""

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self.params = [p.full_tensor() if hasattr(p, "full_tensor") else p.detach().clone() for p in module.parameters()]
        self.local_dtypes = {(p.to_local() if hasattr(p, "to_local") else p).dtype for p in module.parameters()}


class FirstGrads(Callback):
    """The full gradients of the first optimizer step, as reduced over the ranks."""

    def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
        if not hasattr(self, "grads"):
            self.grads = [p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad.clone() for p in module.parameters()]


def _fit(
    module: Any, data: Any, batch: int, accumulate: int = A, strategy: Any = "fsdp", epochs: int = 2, val: Any = None, **kwargs: Any
) -> Grab:
    grab = Grab()
    trainer = Trainer(
        accelerator="cpu", strategy=strategy, max_epochs=epochs, accumulate_grad_batches=accumulate,
        callbacks=[grab], **QUIET, **kwargs,
    )
    trainer.fit(module, loader(data, batch), val)
    grab.val_loss = trainer.callback_metrics.get("val_loss")
    return grab


def _scenarios(rank: int, world_size: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    data, odd = regression_data(64), regression_data(56)
    out: dict[str, Any] = {}
    grab = _fit(Regression("sgd"), data, B, val=loader(regression_data(16, seed=1), B))  # with validation in fit
    out["sgd"], out["sgd_val_loss"] = grab.params, grab.val_loss
    out["sgd_grad_check"] = _fit(Regression("sgd"), data, B, detect_non_finite_grads=True).params
    out["adamw_clip_norm"] = _fit(Regression("adamw"), data, B, gradient_clip_val=0.05).params
    out["sgd_clip_value"] = _fit(Regression("sgd"), data, B, gradient_clip_val=0.01, gradient_clip_algorithm="value").params
    meta = fm.MetaRegression("adamw")
    out["meta_adamw"] = _fit(meta, data, B, gradient_clip_val=0.05).params
    out["meta_configured"] = meta.configured
    out["short_window"] = _fit(Regression("sgd"), odd, B).params
    out["num_items"] = _fit(fm.SumLoss("sgd", lr=0.002), regression_data(60), B).params
    out["scale_lr"] = _fit(Regression("sgd", lr=0.025), data, B, scale_lr="linear").params
    out["manual"] = _fit(fm.ManualAccumulation("sgd"), data, 2 * B, accumulate=1).params
    blocks = dict(auto_wrap_policy={fm.Block})
    out["blocks"] = _fit(fm.Blocks(meta=True), data, B, strategy=FSDPStrategy(**blocks)).params
    out["blocks_checkpointed"] = _fit(
        fm.Blocks(meta=True), data, B, strategy=FSDPStrategy(**blocks, activation_checkpointing_policy=True)
    ).params
    out["blocks_no_reshard"] = _fit(fm.Blocks(), data, B, strategy=FSDPStrategy(**blocks, reshard_after_forward=False)).params
    out["hsdp"] = _fit(Regression("sgd"), data, B, strategy=FSDPStrategy(device_mesh=(1, 2))).params
    out["cpu_offload"] = _fit(Regression("adamw"), data, B, strategy=FSDPStrategy(cpu_offload=True)).params
    out["sync_batchnorm"] = _fit(fm.BatchNormRegression("sgd"), data, B, sync_batchnorm=True).params
    probe = fm.DtypeProbe("sgd")
    grab = _fit(probe, data, B, precision="bf16-mixed")
    out["bf16_mixed"] = (grab.params, grab.local_dtypes, probe.seen_dtype)
    grab = _fit(Regression("sgd"), data, B, precision="bf16-true")
    out["bf16_true"] = (grab.params, grab.local_dtypes)
    first = FirstGrads()
    Trainer(accelerator="cpu", strategy="fsdp", precision="bf16-mixed", max_steps=1, callbacks=[first], **QUIET).fit(
        Regression("sgd"), loader(data, B)
    )
    out["bf16_mixed_grads"] = first.grads

    # peak parameter bytes while configure_model's layers are materialized
    big = fm.Blocks(depth=8, width=32, meta=True, linear=fm.ProbeLinear)
    fm.PROBE.update(model=big, seen=[])
    _fit(big, regression_data(16, features=32), B, strategy=FSDPStrategy(auto_wrap_policy={fm.Block}), epochs=1)
    out["probe"] = (max(fm.PROBE["seen"]), fm.local_param_bytes(big), sum(p.numel() * 4 for p in big.parameters()))
    fm.PROBE.clear()

    # evaluation of a freshly sharded module, and a module reused after its run
    model = Regression("sgd")
    trainer = Trainer(accelerator="cpu", strategy="fsdp", **QUIET)
    out["validate"] = trainer.validate(model, loader(data, B))[0]["val_loss"]
    predictions = Trainer(accelerator="cpu", strategy="fsdp", **QUIET).predict(Regression("sgd"), loader(data, B))
    out["predict"] = torch.cat(predictions)
    try:
        trainer.test(model, loader(data, B))
    except RuntimeError as err:
        out["reuse_error"] = str(err)
    try:
        _fit(fm.MetaWithoutReset("sgd"), data, B)
    except TypeError as err:
        out["no_reset_error"] = str(err)
    try:
        _fit(Regression("sgd"), data, B, strategy=FSDPStrategy(device_mesh=(3,)))
    except ValueError as err:
        out["mesh_error"] = str(err)
    return out


def _hybrid(rank: int, world_size: int) -> list[torch.Tensor]:
    torch.set_num_threads(1)
    return _fit(Regression("sgd"), regression_data(64), 2, strategy=FSDPStrategy(device_mesh=(2, 2))).params


@pytest.mark.timeout(180)
@pytest.mark.launches
def test_hybrid_sharding_on_a_two_by_two_mesh_equals_one_process():
    # 4 ranks: 2 replicas x 2 shards; micro batch 2, A = 2: global batch 16
    runs = run_ranks(_hybrid, world_size=4, init_group=False, timeout=150)
    expected = _reference(Regression("sgd"))
    for params in runs:
        assert_params_close(params, expected, 1e-5)


@pytest.fixture(scope="module")
def fsdp_runs(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return once_per_session(
        tmp_path_factory, "tests/strategies/test_fsdp_training.py::fsdp_runs",
        lambda: run_ranks(_scenarios, world_size=2, init_group=False, timeout=240),
    )


def _reference(module: Any, data: Any = None, accumulate: int = 1, **kwargs: Any) -> list[torch.Tensor]:
    """One process, the global batch 2*B*A (in ``accumulate`` micro batches)."""
    data = regression_data(64) if data is None else data
    Trainer(accelerator="cpu", max_epochs=2, accumulate_grad_batches=accumulate, **QUIET, **kwargs).fit(
        module, loader(data, 2 * B * A // accumulate)
    )
    return params_of(module)


def _check(runs: list[dict[str, Any]], name: str, expected: list[torch.Tensor], atol: float = 1e-5) -> None:
    for rank, run in enumerate(runs):
        assert_params_close(run[name], expected, atol)


def test_fsdp_sgd_momentum_equals_one_process(fsdp_runs):
    _check(fsdp_runs, "sgd", _reference(Regression("sgd")))
    # validation inside fit (sanity check, each epoch) runs on the sharded module
    model = Regression("sgd")
    trainer = Trainer(accelerator="cpu", max_epochs=2, **QUIET)
    trainer.fit(model, loader(regression_data(64), 2 * B * A), loader(regression_data(16, seed=1), 2 * B))
    for run in fsdp_runs:
        assert abs(float(run["sgd_val_loss"]) - float(trainer.callback_metrics["val_loss"])) < 1e-5
    _check(fsdp_runs, "sgd_grad_check", _reference(Regression("sgd")))  # the check reads DTensor gradients


def test_fsdp_adamw_with_norm_clipping_equals_one_process(fsdp_runs):
    # clip_grad_norm_ over DTensor gradients is the global norm over every rank's shards
    _check(fsdp_runs, "adamw_clip_norm", _reference(Regression("adamw"), gradient_clip_val=0.05))


def test_fsdp_value_clipping_equals_one_process(fsdp_runs):
    expected = _reference(Regression("sgd"), gradient_clip_val=0.01, gradient_clip_algorithm="value")
    _check(fsdp_runs, "sgd_clip_value", expected)


def test_configure_model_on_meta_equals_eager_one_process_and_runs_once(fsdp_runs):
    _check(fsdp_runs, "meta_adamw", _reference(Regression("adamw"), gradient_clip_val=0.05))
    assert [run["meta_configured"] for run in fsdp_runs] == [1, 1]


def test_short_last_window_is_a_true_mean(fsdp_runs):
    # 56 samples: 28 per rank = 7 micro batches of 4, so each epoch's last window has one
    _check(fsdp_runs, "short_window", _reference(Regression("sgd"), regression_data(56)))


def test_num_items_normalizes_by_the_global_item_count(fsdp_runs):
    # 60 samples: the last window holds 12, not 16; the mean over items is exact anyway
    _check(fsdp_runs, "num_items", _reference(fm.SumLoss("sgd", lr=0.002), regression_data(60)))


def test_scale_lr_scales_for_the_world_size(fsdp_runs):
    _check(fsdp_runs, "scale_lr", _reference(Regression("sgd", lr=0.05)))


def test_manual_optimization_with_blocked_sync_equals_one_process(fsdp_runs):
    _check(fsdp_runs, "manual", _reference(Regression("sgd")))


def test_sharded_blocks_built_on_meta_equal_eager_blocks(fsdp_runs):
    _check(fsdp_runs, "blocks", _reference(fm.Blocks()))
    _check(fsdp_runs, "blocks_no_reshard", _reference(fm.Blocks()))


def test_activation_checkpointing_changes_no_number(fsdp_runs):
    for run in fsdp_runs:
        assert_params_close(run["blocks_checkpointed"], run["blocks"], 1e-6)


def test_hybrid_sharding_mesh_and_cpu_offload_equal_one_process(fsdp_runs):
    _check(fsdp_runs, "hsdp", _reference(Regression("sgd")))
    _check(fsdp_runs, "cpu_offload", _reference(Regression("adamw")))


def test_sync_batchnorm_under_fsdp_sees_the_global_batch(fsdp_runs):
    # batch statistics over the 2 ranks' micro batches: one process with micro batch 2*B
    _check(fsdp_runs, "sync_batchnorm", _reference(fm.BatchNormRegression("sgd"), accumulate=A))


def test_bf16_mixed_gathers_bf16_keeps_fp32_shards(fsdp_runs):
    expected = _reference(Regression("sgd"), precision="bf16-mixed")
    for run in fsdp_runs:
        params, local_dtypes, seen = run["bf16_mixed"]
        assert local_dtypes == {torch.float32} and seen == torch.bfloat16
        assert_params_close(params, expected, 2e-2)  # bf16 compute: rounding differs with the batch split


def test_bf16_mixed_averages_gradients_over_the_ranks_in_fp32(fsdp_runs):
    """Each rank's gradient is bf16; their mean is taken in fp32 (``reduce_dtype``). The mean of two
    bf16 numbers mostly needs more than bf16's 8 significant bits, which a reduction in bf16 would
    round off: then every element would be a bf16 number."""
    for run in fsdp_runs:
        grads = torch.cat([g.flatten() for g in run["bf16_mixed_grads"]])
        assert grads.dtype == torch.float32 and grads.numel() == 49
        finer_than_bf16 = (grads != grads.bfloat16().float()).float().mean().item()
        assert finer_than_bf16 > 0.2, f"only {finer_than_bf16:.0%} of the gradient is finer than bf16"


def test_bf16_true_keeps_everything_in_bf16(fsdp_runs):
    expected = _reference(Regression("sgd"), precision="bf16-true")
    for run in fsdp_runs:
        params, local_dtypes = run["bf16_true"]
        assert local_dtypes == {torch.bfloat16}
        assert_params_close([p.float() for p in params], [p.float() for p in expected], 5e-2)


def test_meta_layers_never_exist_whole_on_a_rank(fsdp_runs):
    for run in fsdp_runs:
        peak, final, whole = run["probe"]
        # the shards (1/W of the model) plus, briefly, one layer's full parameters
        assert final <= whole / 2 + 512
        assert peak < 0.65 * whole, (peak, final, whole)


def test_evaluation_under_fsdp_and_reuse_after_the_run(fsdp_runs):
    model = Regression("sgd")
    expected = Trainer(accelerator="cpu", **QUIET).validate(model, loader(regression_data(64), 2 * B))[0]["val_loss"]
    predictions = torch.cat(Trainer(accelerator="cpu", **QUIET).predict(Regression("sgd"), loader(regression_data(64), B)))
    for run in fsdp_runs:  # every rank gets every prediction, in dataset order
        assert abs(run["validate"] - expected) < 1e-6
        torch.testing.assert_close(run["predict"], predictions)
        assert "sharded by FSDP in an earlier trainer run" in run["reuse_error"]
        assert "NoReset was built on the meta device" in run["no_reset_error"]
        assert "FSDPStrategy(device_mesh=(3,)) needs 3 ranks, but the run has 2" in run["mesh_error"]
