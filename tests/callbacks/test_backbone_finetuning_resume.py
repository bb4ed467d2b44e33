"""`BackboneFinetuning` resumed after its unfreeze epoch: a fit that crashed there resumes from its
own ``last.ckpt`` (the parameter group the callback added is rebuilt before the optimizer state is
checked and loaded), the optimizer state restored equals the saved one, and the resumed fit ends
where an uninterrupted one does (1e-6)."""
from __future__ import annotations

import copy

import pytest
import torch

import callbacks as cbs
import trainer as L
from tests.helpers.lightning_parity import fit, make_module

UNFREEZE, CRASH_STEP, EPOCHS = 1, 11, 4  # 4 steps an epoch: the crash is inside epoch 2


class CrashAt(cbs.Callback):
    """Raises after optimizer step ``step``, like a node going down."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            raise RuntimeError("simulated crash")


class OptimizerAtFitStart(cbs.Callback):
    """The optimizer's state as the resumed fit starts (restored, not yet stepped)."""

    def on_fit_start(self, trainer, module):
        # a copy: state_dict() shares the buffers that the steps after this update in place
        self.state = copy.deepcopy(trainer.optimizers[0].state_dict())
        self.groups = len(trainer.optimizers[0].param_groups)


def _run(tmp_path, name, extra=(), ckpt_path=None, every_n_train_steps=None):
    ckpt = cbs.ModelCheckpoint(dirpath=tmp_path / name, save_last=True, every_n_train_steps=every_n_train_steps)
    return fit("lockstep", [cbs.BackboneFinetuning(unfreeze_backbone_at_epoch=UNFREEZE), ckpt, *extra],
               epochs=EPOCHS, module=make_module(L, backbone=True)(), ckpt_path=ckpt_path)


def _same_tree(a, b, where="optimizer state"):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, atol=0, rtol=0, msg=where)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _same_tree(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same_tree(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


@pytest.mark.timeout(240)
@pytest.mark.parametrize("every_n_train_steps, saved_step", [(None, 8), (2, 10)], ids=["epoch_end", "mid_epoch"])
def test_resume_after_unfreeze_epoch_matches_uninterrupted(tmp_path, every_n_train_steps, saved_step):
    # mid_epoch: last.ckpt is inside epoch 2, after that epoch's rate change was applied
    _, straight = _run(tmp_path, "straight", every_n_train_steps=every_n_train_steps)
    with pytest.raises(RuntimeError, match="simulated crash"):
        _run(tmp_path, "crashed", extra=[CrashAt(CRASH_STEP)], every_n_train_steps=every_n_train_steps)
    last = tmp_path / "crashed" / "last.ckpt"
    saved = torch.load(last, weights_only=False)
    assert saved["global_step"] == saved_step and len(saved["optimizer_states"][0]["param_groups"]) == 2

    probe = OptimizerAtFitStart()
    trainer, resumed = _run(tmp_path, "resumed", extra=[probe], ckpt_path=str(last),
                            every_n_train_steps=every_n_train_steps)
    assert trainer.global_step == EPOCHS * 4
    assert probe.groups == 2
    _same_tree(probe.state, saved["optimizer_states"][0])
    a, b = resumed.state_dict(), straight.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=0, msg=key)
