"""DDPStrategy options: ``ddp_comm_hook`` names (on gloo) and ``static_graph``, with accumulation.

Every variant trains the same model on 2 ranks with A=2; the ranks must end identical (the hook
really ran on every bucket), the hook must be the one named, and the result must match plain
DDP: exactly for ``static_graph``, to the hook's precision for the compressing hooks.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET, Regression, assert_params_close, loader, params_of, regression_data
from tests.helpers.optional import importorskip
from trainer import DDPStrategy, Trainer
from trainer.strategies.ddp import _bf16_hook_supported

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]

# torch refuses its bf16 hook on a CPU-only build (even on gloo): that variant alone is skipped there
_BF16_OK = _bf16_hook_supported()
_NEEDS_BF16 = pytest.mark.skipif(
    not _BF16_OK,
    reason=f"torch {torch.__version__} (CUDA {torch.version.cuda}) cannot run the bf16_compress hook: "
    "it needs a CUDA build with NCCL >= 2.10 (DDPStrategy refuses it at construction)",
)


def _param(name: str, *rest: Any) -> Any:
    marks = [_NEEDS_BF16] if name == "bf16_compress" else []
    return pytest.param(name, *rest, marks=marks)


def _variants() -> dict[str, dict[str, Any]]:
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState

    variants = {
        "plain": {},
        "static_graph": {"static_graph": True},
        "fp16_compress": {"ddp_comm_hook": "fp16_compress"},
        "bf16_compress": {"ddp_comm_hook": "bf16_compress"},
        "powersgd": {"ddp_comm_hook": "powersgd"},
        # compress from the 2nd synced step on, even matrices too small to gain from it
        "powersgd_early": {"ddp_comm_hook": "powersgd", "ddp_comm_state": PowerSGDState(
            process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2, min_compression_rate=0.1
        )},
    }
    if not _bf16_hook_supported():
        del variants["bf16_compress"]
    return variants


_NAMES = ["plain", "static_graph", "fp16_compress", "bf16_compress", "powersgd", "powersgd_early"]


def _train_variants(rank: int, world_size: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    out = {}
    for name, kwargs in _variants().items():
        strategy = DDPStrategy(**kwargs)
        trainer = Trainer(accelerator="cpu", max_epochs=2, accumulate_grad_batches=2, strategy=strategy, **QUIET)
        module = Regression("adamw", lr=0.01)
        trainer.fit(module, loader(regression_data(64), 4))
        hook = strategy.model._get_ddp_logging_data().get("comm_hook", "")  # type: ignore[union-attr]
        out[name] = {"params": params_of(module), "steps": trainer.global_step, "hook": hook}
    return out


@pytest.fixture(scope="module")
def results():
    return run_ranks(_train_variants, world_size=2, init_group=False, timeout=170)


@pytest.mark.parametrize("name", [_param(name) for name in _NAMES])
def test_ranks_agree_and_the_named_hook_ran(results, name):
    r0, r1 = results[0][name], results[1][name]
    assert r0["steps"] == r1["steps"] == 8
    assert_params_close(r0["params"], r1["params"], atol=0.0)
    expected = {"fp16_compress": "fp16_compress_hook", "bf16_compress": "bf16_compress_hook",
                "powersgd": "powerSGD_hook", "powersgd_early": "powerSGD_hook"}.get(name, "")
    assert expected in r0["hook"]


@pytest.mark.parametrize(
    "name, atol",
    [_param(*case) for case in
     [("static_graph", 1e-6), ("fp16_compress", 2e-3), ("bf16_compress", 2e-2), ("powersgd", 1e-6)]],
)
def test_matches_plain_ddp(results, name, atol):
    # powersgd with torch's defaults all-reduces plainly for its first 1000 steps
    assert_params_close(results[0][name]["params"], results[0]["plain"]["params"], atol=atol)


def test_early_powersgd_compresses(results):
    early, plain = results[0]["powersgd_early"]["params"], results[0]["plain"]["params"]
    diffs = [(a - b).abs().max().item() for a, b in zip(early, plain)]
    assert 0 < max(diffs) < 0.5


def test_bf16_hook_is_refused_at_construction_where_the_build_cannot_run_it(monkeypatch):
    # A CPU-only torch (torch.version.cuda is None) cannot run it; this machine's torch can, so
    # the build check the strategy uses is switched off here (torch.distributed is untouched).
    import trainer.strategies.ddp as ddp

    monkeypatch.setattr(ddp, "_bf16_hook_supported", lambda: False, raising=False)
    with pytest.raises(ValueError) as raised:
        DDPStrategy(ddp_comm_hook="bf16_compress")
    message = str(raised.value)
    assert message.startswith("DDPStrategy(ddp_comm_hook='bf16_compress') cannot run on this torch build")
    assert torch.__version__ in message and "'fp16_compress'" in message and "'powersgd'" in message
    with pytest.raises(ValueError, match=r"ddp_comm_hook=bf16_compress_hook\) cannot run on this torch"):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook

        DDPStrategy(ddp_comm_hook=bf16_compress_hook)
    # the other hooks do not need it
    assert DDPStrategy(ddp_comm_hook="fp16_compress").ddp_comm_hook == "fp16_compress"
    assert DDPStrategy(ddp_comm_hook="powersgd").ddp_comm_hook == "powersgd"


def test_unknown_hook_name_is_rejected_at_construction():
    with pytest.raises(ValueError, match="ddp_comm_hook must be one of"):
        DDPStrategy(ddp_comm_hook="int8_compress")


@pytest.mark.parametrize("name, find_unused", [("ddp_find_unused_parameters_true", True), ("ddp_find_unused_parameters_false", False)])
def test_lightnings_find_unused_parameters_strategy_names(name, find_unused):
    strategy = Trainer(accelerator="cpu", devices=2, strategy=name, **QUIET).strategy
    assert isinstance(strategy, DDPStrategy)
    assert strategy.ddp_kwargs["find_unused_parameters"] is find_unused


@pytest.mark.parametrize("cls", ["DDPStrategy", "FSDPStrategy"])
def test_the_strategy_s_accelerator_is_the_trainer_s_as_in_lightning(cls):
    # Lightning's `DDPStrategy(accelerator=...)` (PyG's examples build one): the Trainer's "auto" takes it
    import trainer

    strategy = getattr(trainer, cls)(accelerator="cpu")
    assert Trainer(accelerator="auto", devices=2, strategy=strategy, **QUIET).strategy.accelerator.kind == "cpu"
    with pytest.raises(ValueError, match=rf"set twice: {cls}\(accelerator='cpu'\) and Trainer\(accelerator='cpu'\)"):
        Trainer(accelerator="cpu", strategy=getattr(trainer, cls)(accelerator="cpu"), **QUIET)
    with pytest.raises(TypeError, match="accelerator must be a str"):
        getattr(trainer, cls)(accelerator=3)


def test_lightning_also_refuses_the_accelerator_set_twice():
    pl = importorskip("lightning.pytorch", reason="Lightning 2.x (the `dev` extra)")
    with pytest.raises(Exception, match="accelerator set through both strategy class and accelerator flag"):
        pl.Trainer(accelerator="cpu", strategy=pl.strategies.DDPStrategy(accelerator="cpu"))
