"""The same training on any number of ranks, shuffled, and resumed on another world size.

With the global batch G = W * b * A fixed, DDP(W=2, b=4, A=2), DDP(W=4, b=4, A=1) and one process
(b=16) take the same optimizer steps on the same samples (`GlobalBatchSampler`), so they end with
the same parameters (SGD with momentum and AdamW); a run stopped mid-epoch on W=2 and resumed on
W=1 (b=4, A=4 or b=16) or W=4 (b=4) continues exactly (AdamW), and so does an FSDP run
(G = 12: W=2 with b=3, A=2 resumed on W=1 with b=12 and on W=3 with b=4).
98 samples (not a multiple of 16): the last window of each epoch holds 2 samples, so at W=4 two
ranks train a padding micro batch with weight 0 in it. Real processes (gloo on 127.0.0.1); one
launch per world size, shared by the asserts through module fixtures.
"""
from __future__ import annotations

import os
import warnings
from typing import Any

import pytest
import torch

from callbacks import Callback
from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET, Regression, assert_params_close, loader, regression_data
from tests.helpers.session_cache import once_per_session
from trainer import FSDPStrategy, Trainer, seed_everything
from trainer import GlobalBatchChangedError, GlobalBatchError

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(300)]

N, EPOCHS = 98, 3
STEPS = 3 * 7  # ceil(98 / 16) = 7 steps an epoch
STOP = 10  # 3 steps into epoch 1: 48 samples of it trained
OPTIMIZERS = ("sgd", "adamw")
FSDP_STEPS, FSDP_STOP = 3 * 9, 12  # G = 12: ceil(98 / 12) = 9 steps an epoch; stop 3 steps into epoch 1

try:
    from torch.distributed.fsdp import fully_shard  # noqa: F401

    FSDP2 = True
except ImportError:  # pragma: no cover - torch without FSDP2
    FSDP2 = False


class Grab(Callback):
    """The full parameters at the end of training (FSDP: gathered while the group exists); with
    ``stop``, a checkpoint after that global step and then a simulated crash."""

    def __init__(self, stop: int | None = None, path: str | None = None) -> None:
        self.stop, self.path, self.params, self.stepped = stop, path, None, 0

    def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
        self.stepped += 1

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self.stop is not None and trainer.global_step == self.stop and trainer.fit_loop.batches_done % trainer.accumulate_grad_batches == 0:
            trainer.save_checkpoint(self.path)
            raise KeyboardInterrupt("simulated crash")

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self.params = [p.full_tensor() if hasattr(p, "full_tensor") else p.detach().clone() for p in module.parameters()]


def _fit(optimizer: str, batch: int, accumulate: int, ckpt: str | None = None, stop: int | None = None,
         strategy: Any = "auto", **kwargs: Any) -> tuple[list[torch.Tensor] | None, int, list[str]]:
    seed_everything(0)
    grab = Grab(stop, ckpt if stop is not None else None)
    trainer = Trainer(accelerator="cpu", strategy=strategy, max_epochs=EPOCHS, accumulate_grad_batches=accumulate,
                      callbacks=[grab], **QUIET, **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trainer.fit(Regression(optimizer), loader(regression_data(N), batch, shuffle=True),
                        ckpt_path=ckpt if stop is None else None)
        except KeyboardInterrupt:
            pass
    return grab.params, trainer.global_step, [str(w.message) for w in caught]


def _fsdp() -> Any:
    return FSDPStrategy(auto_wrap_policy={torch.nn.Linear})


def _two_ranks(rank: int, world_size: int, tmp: str) -> dict[str, Any]:
    torch.set_num_threads(1)
    out: dict[str, Any] = {opt: _fit(opt, 4, 2) for opt in OPTIMIZERS}
    out["fixed_g"] = _fit("adamw", 4, 1, global_batch_size=16)  # A = 16 / (2 * 4) derived
    _fit("adamw", 4, 2, ckpt=os.path.join(tmp, "adamw.ckpt"), stop=STOP)
    if FSDP2:
        out["fsdp"] = _fit("adamw", 3, 2, strategy=_fsdp())
        _fit("adamw", 3, 2, ckpt=os.path.join(tmp, "fsdp.ckpt"), stop=FSDP_STOP, strategy=_fsdp())
    return out


def _four_ranks(rank: int, world_size: int, tmp: str) -> dict[str, Any]:
    torch.set_num_threads(1)
    out: dict[str, Any] = {opt: _fit(opt, 4, 1) for opt in OPTIMIZERS}
    out["resumed"] = _fit("adamw", 4, 1, ckpt=os.path.join(tmp, "adamw.ckpt"))
    try:  # 4 x 4 does not divide 24: refused before any step
        _fit("adamw", 4, 1, global_batch_size=24)
    except GlobalBatchError as refused:
        out["refused"] = str(refused)
    return out


def _fsdp_resumed(rank: int, world_size: int, tmp: str) -> Any:
    torch.set_num_threads(1)
    batch = {1: 12, 3: 4}[world_size]  # G = 12 as on W=2 (b=3, A=2)
    return _fit("adamw", batch, 1, ckpt=os.path.join(tmp, "fsdp.ckpt"), strategy=_fsdp())


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """W=2 (b=4, A=2): the uninterrupted runs (SGD, AdamW, FSDP) and the checkpoints of the stopped ones."""
    def launch():
        tmp = str(tmp_path_factory.mktemp("any_world_size"))
        return tmp, run_ranks(_two_ranks, world_size=2, args=(tmp,), init_group=False, timeout=280)

    # The tests only read the directory (they resume from its checkpoints).
    return once_per_session(tmp_path_factory, "tests/strategies/test_any_world_size.py::two", launch)


@pytest.fixture(scope="module")
def four(two, tmp_path_factory):
    tmp, _ = two
    return once_per_session(
        tmp_path_factory, "tests/strategies/test_any_world_size.py::four",
        lambda: run_ranks(_four_ranks, world_size=4, args=(tmp,), init_group=False, timeout=280),
    )


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_one_and_two_ranks_end_with_the_same_parameters(two, optimizer):
    single, steps, _ = _fit(optimizer, 16, 1)
    assert steps == STEPS
    for params, rank_steps, _ in (out[optimizer] for out in two[1]):
        assert rank_steps == STEPS
        assert_params_close(params, single, atol=1e-5)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_four_ranks_end_with_the_parameters_of_two(two, four, optimizer):
    reference, _, _ = two[1][0][optimizer]
    for params, steps, _ in (out[optimizer] for out in four):
        assert steps == STEPS
        assert_params_close(params, reference, atol=1e-5)


@pytest.mark.parametrize("batch, accumulate", [(4, 4), (16, 1)])
def test_stopped_on_two_ranks_resumed_on_one_continues_exactly(two, batch, accumulate):
    tmp, results = two
    straight, steps, _ = results[0]["adamw"]
    resumed, resumed_steps, caught = _fit("adamw", batch, accumulate, ckpt=os.path.join(tmp, "adamw.ckpt"))
    assert resumed_steps == steps == STEPS
    assert_params_close(resumed, straight, atol=1e-5)
    assert any("made with world size 2 on world size 1" in w and "continues exactly" in w for w in caught)


def test_stopped_on_two_ranks_resumed_on_four_continues_exactly(two, four):
    straight, _, _ = two[1][0]["adamw"]
    for resumed, steps, _ in (out["resumed"] for out in four):
        assert steps == STEPS
        assert_params_close(resumed, straight, atol=1e-5)


def test_a_fixed_global_batch_derives_the_accumulation_on_two_ranks(two):
    single, _, _ = _fit("adamw", 16, 1)
    for params, steps, _ in (out["fixed_g"] for out in two[1]):
        assert steps == STEPS
        assert_params_close(params, single, atol=1e-5)


def test_a_fixed_global_batch_resumes_a_two_rank_checkpoint_on_one_rank(two):
    tmp, results = two
    straight, _, _ = results[0]["adamw"]
    resumed, steps, _ = _fit("adamw", 4, 1, ckpt=os.path.join(tmp, "adamw.ckpt"), global_batch_size=16)  # A = 4
    assert steps == STEPS
    assert_params_close(resumed, straight, atol=1e-5)


def test_a_fixed_global_batch_four_ranks_cannot_make_is_refused_naming_the_world_sizes_that_work(four):
    for out in four:
        assert out["refused"].endswith("world size 4 does not divide 6 micro batches. The world sizes that work: "
                                       "1, 2, 3, 6. No step was taken.")


def test_another_global_batch_is_refused_before_any_step(two):
    tmp, _ = two
    seed_everything(0)
    grab = Grab()
    module = Regression("adamw")
    trainer = Trainer(accelerator="cpu", max_epochs=EPOCHS, callbacks=[grab], **QUIET)
    with pytest.raises(GlobalBatchChangedError, match=r"global batch of 16 samples per optimizer step; this run has 8 "
                       r"\(world size 1 x micro batch 8 x accumulate_grad_batches 1\).*allow_global_batch_change=True"):
        trainer.fit(module, loader(regression_data(N), 8, shuffle=True), ckpt_path=os.path.join(tmp, "adamw.ckpt"))
    assert grab.stepped == 0 and trainer.global_step == STOP


def test_opting_in_continues_from_the_next_unseen_sample_with_the_new_global_batch(two):
    tmp, _ = two
    params, steps, caught = _fit("adamw", 8, 1, ckpt=os.path.join(tmp, "adamw.ckpt"), allow_global_batch_change=True)
    # epoch 1 had 48 of 98 samples trained: 50 left, 7 steps of 8 (the last of 2); then 13 steps in epoch 2
    assert steps == STOP + 7 + 13
    assert any("allow_global_batch_change=True: training continues from the next unseen sample" in w for w in caught)


@pytest.mark.skipif(not FSDP2, reason="FSDP2 (torch.distributed.fsdp.fully_shard) is not available")
@pytest.mark.parametrize("world_size", [1, 3])
def test_fsdp_stopped_on_two_ranks_resumed_on_another_world_size_continues_exactly(two, world_size):
    tmp, results = two
    straight, steps, _ = results[0]["fsdp"]
    assert steps == FSDP_STEPS
    for params, resumed_steps, _ in run_ranks(_fsdp_resumed, world_size=world_size, args=(tmp,), init_group=False, timeout=150):
        assert resumed_steps == FSDP_STEPS
        assert_params_close(params, straight, atol=1e-5)
