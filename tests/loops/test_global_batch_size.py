"""`Trainer(global_batch_size=G)`: A = G / (W * b) derived at set-up, refused before any step when
it cannot be met or disagrees with `accumulate_grad_batches`, and the LR scaled for G / b.

One process here (the fast tier); the same on 2 and 4 ranks, and a W=2 checkpoint resumed on
W=1 with the G derived, in tests/strategies/test_any_world_size.py.
"""
from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from callbacks import GradientAccumulationScheduler, ModelCheckpoint
from tests.helpers.models import QUIET, Regression, assert_params_close, loader, regression_data
from trainer import GlobalBatchError, Trainer, seed_everything
from trainer.checkpointing.resume import GlobalBatchChangedError
from trainer.contracts.accumulation import accumulation_for

pytestmark = pytest.mark.timeout(120)

N = 29  # not a multiple of G: the last step of each epoch holds 5 samples


def _fit(batch: int, **kwargs) -> tuple[Trainer, Regression]:
    seed_everything(0)
    module = Regression("adamw")
    trainer = Trainer(accelerator="cpu", max_epochs=2, **{**QUIET, **kwargs})
    trainer.fit(module, loader(regression_data(N), batch, shuffle=True))
    return trainer, module


def test_the_accumulation_is_derived_and_the_run_is_that_of_one_big_batch():
    fixed, module = _fit(2, global_batch_size=12)
    assert fixed.accumulate_grad_batches == 6 and fixed.global_batch_size == 12
    big, reference = _fit(12)
    assert fixed.global_step == big.global_step == 2 * 3
    assert_params_close(list(module.parameters()), list(reference.parameters()), atol=1e-6)


def test_the_global_batch_is_reported_before_fit():
    assert Trainer(accelerator="cpu", global_batch_size=12, **QUIET).global_batch_size == 12


def test_an_agreeing_accumulation_runs():
    trainer, _ = _fit(2, global_batch_size=12, accumulate_grad_batches=6)
    assert trainer.accumulate_grad_batches == 6 and trainer.global_step == 6


def test_a_disagreeing_accumulation_is_refused_before_any_step(tmp_path):
    seed_everything(0)
    trainer = Trainer(accelerator="cpu", max_epochs=1, global_batch_size=12, accumulate_grad_batches=4,
                      callbacks=[ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1)],
                      **{**QUIET, "enable_checkpointing": True})
    with pytest.raises(GlobalBatchError, match=r"accumulate_grad_batches=4 disagrees with global_batch_size=12: on "
                       r"world size 1 with micro batch 2 it is 6\. Pass one of them\. No step was taken\."):
        trainer.fit(Regression(), loader(regression_data(N), 2, shuffle=True))
    assert trainer.global_step == 0 and list(tmp_path.iterdir()) == []


def test_a_micro_batch_that_does_not_divide_g_is_refused_naming_the_ones_that_do():
    with pytest.raises(GlobalBatchError, match=r"global_batch_size=12 with micro batch 5 .* no world size can, as 5 "
                       r"does not divide 12\. Choose a micro batch that divides it \(1, 2, 3, 4, 6, 12\)"):
        _fit(5, global_batch_size=12)


def test_a_world_size_that_does_not_divide_names_the_world_sizes_that_work():
    assert [accumulation_for(12, w, 2) for w in (1, 2, 3, 6)] == [6, 3, 2, 1]
    with pytest.raises(GlobalBatchError, match=r"world size 4 does not divide 6 micro batches\. The world sizes "
                       r"that work: 1, 2, 3, 6\. No step was taken\."):
        accumulation_for(12, 4, 2)


def test_a_loader_without_a_batch_size_is_refused():
    x, y = regression_data(N).tensors
    batches = list(zip(x.split(2), y.split(2)))  # made by the dataset itself: the loader does not batch
    trainer = Trainer(accelerator="cpu", max_epochs=1, global_batch_size=12, **QUIET)
    with pytest.raises(GlobalBatchError, match="needs the micro batch: the train loader has no batch_size"):
        trainer.fit(Regression(), DataLoader(batches, batch_size=None))


def test_a_callback_changing_the_accumulation_is_refused():
    with pytest.raises(ValueError, match=r"Trainer\(accumulate_grad_batches=6\) and GradientAccumulationScheduler both "
                       r"set the accumulation.*global_batch_size"):
        _fit(2, global_batch_size=12, callbacks=[GradientAccumulationScheduler({0: 2})])
    # A = 1 derived (b = G): the scheduler cannot tell it from the default, the loop refuses its change
    with pytest.raises(GlobalBatchError, match=r"accumulate_grad_batches was set to 2 during the fit .* with "
                       r"global_batch_size=12 it is 1 on world size 1"):
        _fit(12, global_batch_size=12, callbacks=[GradientAccumulationScheduler({0: 2})])


def test_scale_lr_scales_for_the_micro_batches_of_g_whatever_the_world_size():
    trainer, module = _fit(2, global_batch_size=12, scale_lr=True, max_steps=1)
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.05 * 6)
    trainer, module = _fit(3, global_batch_size=12, scale_lr="sqrt", max_steps=1)
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.05 * 2)


@pytest.mark.parametrize("value, error, message", [
    (0, ValueError, "global_batch_size must be None or an int >= 1, got 0"),
    ("12", TypeError, "global_batch_size must be None or an int >= 1, got '12'"),
])
def test_bad_global_batch_sizes_are_refused(value, error, message):
    with pytest.raises(error, match=message):
        Trainer(accelerator="cpu", global_batch_size=value, **QUIET)


HUGE = 10**15 + 1  # = 7 x 11 x 13 x 211 x 241 x 2161 x 9091: listing its divisors number by number never ends
HUGE_DIVISORS = ("1, 7, 11, 13, 77, 91, 143, 211, 241, 1001, 1477, 1687, 2161, 2321, 2651, 2743, 3133, 9091, "
                 f"{HUGE} (the divisors up to 10000, and {HUGE} itself; larger ones not searched)")


@pytest.mark.timeout(20)
def test_a_huge_global_batch_is_refused_at_once_naming_the_micro_batches_that_work(tmp_path):
    trainer = Trainer(accelerator="cpu", max_epochs=1, global_batch_size=HUGE, default_root_dir=tmp_path, **QUIET)
    with pytest.raises(GlobalBatchError) as err:
        trainer.fit(Regression(), loader(regression_data(N), 2, shuffle=True))
    assert str(err.value) == (
        f"global_batch_size={HUGE} with micro batch 2 (the train loader's batch_size) needs world_size x 2 x "
        f"accumulate_grad_batches = {HUGE}: no world size can, as 2 does not divide {HUGE}. Choose a micro batch "
        f"that divides it ({HUGE_DIVISORS}). No step was taken."
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(20)
def test_a_huge_global_batch_names_the_world_sizes_that_work():
    with pytest.raises(GlobalBatchError) as err:
        accumulation_for(2 * HUGE, 2, 2)
    assert str(err.value).endswith(
        f"and world size 2 does not divide {HUGE} micro batches. The world sizes that work: {HUGE_DIVISORS}. "
        "No step was taken."
    )


def test_a_long_list_of_world_sizes_is_cut_short_with_its_count():
    with pytest.raises(GlobalBatchError, match=r"The world sizes that work: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, "
                       r"13, 14, 15, 16, 18, 20, 21, 22, 24, 26, 28, 30, 33, 35, 36, 39, 40, 42, 44, 45, \.\.\. "
                       r"\(240 in all, up to 720720\)\. No step"):
        accumulation_for(2 * 720720, 17, 2)


def test_an_epoch_end_checkpoint_resumed_with_another_global_batch_is_refused_end_to_end(tmp_path):
    """The checkpoint ends epoch 0 with G = 8 (every sample seen); the next epoch on G = 4 would be
    another run: refused before any step, unless allowed (then warned, and it trains on)."""
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    first = Trainer(accelerator="cpu", max_epochs=1, callbacks=[checkpoint], **{**QUIET, "enable_checkpointing": True})
    seed_everything(0)
    first.fit(Regression(), loader(regression_data(N), 8, shuffle=True))
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)["loops"]["fit_loop"]
    assert saved["epoch_finished"] and saved["global_batch_size"] == 8
    model = Regression()
    again = Trainer(accelerator="cpu", max_epochs=2, **QUIET)
    with pytest.raises(GlobalBatchChangedError, match=r"written with a global batch of 8 samples per optimizer step; "
                       r"this run has 4 \(world size 1 x micro batch 4 x accumulate_grad_batches 1\).*No step was taken"):
        again.fit(model, loader(regression_data(N), 4, shuffle=True), ckpt_path=tmp_path / "last.ckpt")
    assert again.global_step == first.global_step  # restored, and no step after it
    allowed = Trainer(accelerator="cpu", max_epochs=2, allow_global_batch_change=True, **QUIET)
    with pytest.warns(UserWarning, match=r"global batch of 8 .* allow_global_batch_change=True"):
        allowed.fit(Regression(), loader(regression_data(N), 4, shuffle=True), ckpt_path=tmp_path / "last.ckpt")
    assert allowed.global_step == first.global_step + 8  # ceil(29 / 4) steps of the second epoch
    # the same global batch of other micro batches (4 x 2) resumes
    same = Trainer(accelerator="cpu", max_epochs=2, accumulate_grad_batches=2, **QUIET)
    same.fit(Regression(), loader(regression_data(N), 4, shuffle=True), ckpt_path=tmp_path / "last.ckpt")
    assert same.global_step == 2 * first.global_step
