"""`EMAWeightAveraging` across a fit stopped by ``max_steps``: a checkpoint written after the fit
(``trainer.save_checkpoint`` and the ``last.ckpt`` of fit end) holds the trained weights under
``current_model_state`` and the average as ``state_dict``, as mid-fit ones do, so a fit resumed
from it ends where the uninterrupted fit does (weights and average, 1e-6)."""
from __future__ import annotations

import pytest
import torch

from tests.helpers.lightning_parity import fit, framework, make_module

EMA = {"decay": 0.9, "update_every_n_steps": 1}
STOP, END = 6, 12  # 4 steps an epoch: the first fit stops inside its second epoch


def _ema_fit(tmp_path, name, max_steps, ckpt_path=None):
    L, cbs = framework("lockstep")
    ckpt = cbs.ModelCheckpoint(dirpath=tmp_path / name, save_last=True, save_top_k=0)
    trainer, model = fit("lockstep", [cbs.EMAWeightAveraging(**EMA), ckpt], epochs=-1, max_steps=max_steps,
                         module=make_module(L, batchnorm=True)(), ckpt_path=ckpt_path)
    saved = tmp_path / f"{name}.ckpt"
    trainer.save_checkpoint(saved)
    return model, torch.load(saved, weights_only=False), torch.load(tmp_path / name / "last.ckpt", weights_only=False)


def _close(a, b):
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key].float(), b[key].float(), atol=1e-6, rtol=0, msg=key)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("source", ["save_checkpoint", "last_ckpt"])
def test_resume_after_max_steps_matches_uninterrupted(tmp_path, source):
    straight, straight_ckpt, _ = _ema_fit(tmp_path, "straight", END)
    _, stopped_ckpt, stopped_last = _ema_fit(tmp_path, "stopped", STOP)
    assert stopped_ckpt["global_step"] == stopped_last["global_step"] == STOP
    # both files hold the same thing: trained weights beside the average, never the average twice
    _close(stopped_ckpt["current_model_state"], stopped_last["current_model_state"])
    _close(stopped_ckpt["state_dict"], stopped_last["state_dict"])
    gap = max((stopped_ckpt["current_model_state"][k].float() - stopped_ckpt["state_dict"][k].float()).abs().max()
              for k in stopped_ckpt["state_dict"])
    assert gap > 1e-3, "the trained weights and the average should differ after 6 steps"

    path = tmp_path / "stopped.ckpt" if source == "save_checkpoint" else tmp_path / "stopped" / "last.ckpt"
    resumed, resumed_ckpt, _ = _ema_fit(tmp_path, "resumed", END, ckpt_path=str(path))
    assert resumed_ckpt["global_step"] == END
    _close(resumed.state_dict(), straight.state_dict())  # the module ends on the average
    _close(resumed_ckpt["state_dict"], straight_ckpt["state_dict"])  # the average
    _close(resumed_ckpt["current_model_state"], straight_ckpt["current_model_state"])  # the trained weights
    _close(resumed_ckpt["averaging_state"], straight_ckpt["averaging_state"])
