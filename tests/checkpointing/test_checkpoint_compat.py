"""A checkpoint written by Lockstep 0.1 (before the architecture reshape) resumes to the same parameters.

The fixtures were written with an older torch: its CPU kernels round a few float32 sums differently
from today's (about 3e-8 here, on the code of v0.1 as well), so the parameters are compared to 1e-6
rather than bitwise. Bitwise resume on one torch is tested in test_checkpoint_resume.py."""
from __future__ import annotations

import torch

from tests.fixtures.legacy_checkpoint import TOTAL_EPOCHS, LegacyRegression, loader, params, trainer
from trainer.checkpoint_io.file_format import FORMAT_VERSION, load_checkpoint

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_a_v0_1_checkpoint_keeps_its_format():
    saved = load_checkpoint(FIXTURES / "v0_1_mid_epoch.ckpt")
    assert saved["format_version"] == FORMAT_VERSION
    assert (saved["epoch"], saved["global_step"]) == (1, 7)
    assert saved["loops"] == {"fit_loop": {"batches_done": 6, "epoch_finished": False}}


def test_a_v0_1_checkpoint_resumes_to_the_same_parameters(tmp_path):
    expected = torch.load(FIXTURES / "v0_1_resumed.pt", weights_only=True)
    resumed = trainer(str(tmp_path), max_epochs=TOTAL_EPOCHS)
    module = LegacyRegression()
    resumed.fit(module, loader(), ckpt_path=FIXTURES / "v0_1_mid_epoch.ckpt")
    assert resumed.global_step == expected["global_step"]
    for got, want in zip(params(module), expected["params"]):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_a_checkpoint_written_today_has_the_v0_1_keys(tmp_path):
    first = trainer(str(tmp_path), max_steps=7)
    first.fit(LegacyRegression(), loader())
    first.save_checkpoint(tmp_path / "now.ckpt")
    now = load_checkpoint(tmp_path / "now.ckpt")
    legacy = load_checkpoint(FIXTURES / "v0_1_mid_epoch.ckpt")
    # which run wrote it (restarts resume only their own); Lightning's name of the hyperparameters'
    # argument; the Lightning release whose layout it also has (Lightning resumes it)
    assert set(now) == set(legacy) | {"run_id", "run_attempt", "hparams_name", "pytorch-lightning_version"}
    assert now["hparams_name"] == "kwargs"
    # the position in samples (any-world-size resume) and the epoch's dataset length are added;
    # the v0.1 entries are unchanged
    position = now["loops"]["fit_loop"]
    assert {k: position[k] for k in legacy["loops"]["fit_loop"]} == legacy["loops"]["fit_loop"]
    assert (position["samples_done"], position["global_batch_size"]) == (24, 8)  # 3 steps of 8 into epoch 1
    assert position["dataset_size"] == len(loader().dataset)
    for key in ("epoch", "global_step", "world_size", "accumulate_grad_batches", "lr_scaled", "hyper_parameters"):
        assert now[key] == legacy[key], key
    for name, tensor in legacy["state_dict"].items():
        torch.testing.assert_close(now["state_dict"][name], tensor, rtol=0, atol=1e-6, msg=name)
