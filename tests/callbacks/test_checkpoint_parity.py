"""ModelCheckpoint and EarlyStopping against Lightning: the same arguments write the same files
(names, sub-directories, links) and stop at the same epoch, on the same scripted metrics."""
from __future__ import annotations

import os

import pytest
import torch

from tests.helpers.lightning_parity import files_under, fit, framework, make_module
from tests.helpers.optional import importorskip

importorskip("lightning", reason="needs `lightning` (the bench extra: pip install -e '.[bench]')")

CASES = {
    "top_k_by_validation_with_last": dict(monitor="val_metric", save_top_k=2, save_last=True, filename="{epoch}-{val_metric:.1f}"),
    "max_mode_all": dict(monitor="val_metric", mode="max", save_top_k=-1),
    "every_n_train_steps": dict(every_n_train_steps=3, save_top_k=-1, save_last=True),
    "every_n_epochs_link": dict(every_n_epochs=2, save_top_k=-1, save_last="link"),
    "latest_link": dict(save_last="link"),
    "grouped_metric_names": dict(monitor="val/loss", save_top_k=2, filename="{epoch}-{val/loss:.2f}"),
    "no_metric_names": dict(monitor="val/loss", filename="e{epoch:02d}-{val/loss:.2f}", auto_insert_metric_name=False),
    "train_metric_at_epoch_end": dict(monitor="train_metric", save_top_k=1, save_on_train_epoch_end=True, save_last=True),
    "top_0_last_only": dict(save_top_k=0, save_last=True),
    "weights_only": dict(save_weights_only=True, save_top_k=-1),
}


def _links(directory):
    return {
        os.path.relpath(os.path.join(root, n), directory): os.readlink(os.path.join(root, n))
        for root, _, names in os.walk(directory)
        for n in names
        if os.path.islink(os.path.join(root, n))
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_files_as_lightning(tmp_path, case):
    written = {}
    for name in ("lightning", "lockstep"):
        _, cbs = framework(name)
        directory = tmp_path / name
        ckpt = cbs.ModelCheckpoint(dirpath=directory, **CASES[case])
        fit(name, [ckpt], epochs=5)
        last = directory / "last.ckpt"
        last_step = torch.load(last, weights_only=False)["global_step"] if last.exists() else None
        best = os.path.relpath(ckpt.best_model_path, directory) if ckpt.best_model_path else ""
        written[name] = (files_under(directory), _links(directory), best, last_step)
    assert written["lockstep"] == written["lightning"]


def test_early_stopping_thresholds_like_lightning(tmp_path):
    for kwargs in (
        dict(monitor="val_metric", patience=1),
        dict(monitor="val_metric", patience=10, stopping_threshold=3.5),
        dict(monitor="val_metric", patience=10, divergence_threshold=4.5, mode="max"),
        dict(monitor="train_metric", patience=1, check_on_train_epoch_end=True),
        dict(monitor="val_metric", patience=2, min_delta=1.5, log_rank_zero_only=True),
    ):
        stopped = {}
        for name in ("lightning", "lockstep"):
            _, cbs = framework(name)
            stopper = cbs.EarlyStopping(**kwargs)
            trainer, _ = fit(name, [stopper], epochs=6)
            stopped[name] = (trainer.current_epoch, stopper.stopped_epoch, stopper.wait_count, float(stopper.best_score))
        assert stopped["lockstep"] == stopped["lightning"], kwargs


def test_early_stopping_strict_false_skips_a_missing_metric():
    _, cbs = framework("lockstep")
    with pytest.warns(RuntimeWarning, match="not_logged"):
        trainer, _ = fit("lockstep", [cbs.EarlyStopping(monitor="not_logged", strict=False)], epochs=2)
    assert trainer.current_epoch == 2


def test_weights_only_checkpoint_loads_and_refuses_resume(tmp_path):
    L, cbs = framework("lockstep")
    ckpt = cbs.ModelCheckpoint(dirpath=tmp_path, save_weights_only=True)
    _, model = fit("lockstep", [ckpt], epochs=1)
    saved = torch.load(ckpt.best_model_path, weights_only=True)
    assert "optimizer_states" not in saved and "callbacks" not in saved and saved["global_step"] == 4
    loaded = type(model).load_from_checkpoint(ckpt.best_model_path)
    for a, b in zip(loaded.parameters(), model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    Module = make_module(L)
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False)
    with pytest.raises(ValueError, match=r"holds only the model's weights .*save_weights_only=True.*load_from_checkpoint"):
        trainer.fit(Module(), ckpt_path=ckpt.best_model_path)


def test_to_yaml_and_kth_best(tmp_path):
    _, cbs = framework("lockstep")
    ckpt = cbs.ModelCheckpoint(dirpath=tmp_path, monitor="val_metric", save_top_k=2, filename="{epoch}")
    fit("lockstep", [ckpt], epochs=5)
    assert os.path.basename(ckpt.kth_best_model_path) == "epoch=4.ckpt" and ckpt.kth_value == 2.0
    ckpt.to_yaml()
    import yaml

    with open(tmp_path / "best_k_models.yaml") as f:
        assert yaml.safe_load(f) == {str(tmp_path / "epoch=3.ckpt"): 1.0, str(tmp_path / "epoch=4.ckpt"): 2.0}
    assert cbs.ModelCheckpoint.CHECKPOINT_NAME_LAST == "last"


def test_exclusive_schedules_and_time_interval(tmp_path):
    import datetime

    _, cbs = framework("lockstep")
    with pytest.raises(ValueError, match="mutually exclusive"):
        cbs.ModelCheckpoint(every_n_train_steps=2, every_n_epochs=1)
    # a zero interval is due after every batch (as Lightning: checked after each training batch)
    ckpt = cbs.ModelCheckpoint(dirpath=tmp_path, train_time_interval=datetime.timedelta(0), save_top_k=-1, filename="{step}")
    fit("lockstep", [ckpt], epochs=1)
    assert files_under(tmp_path) == [f"step={s}.ckpt" for s in (1, 2, 3, 4)]


def test_save_on_exception(tmp_path):
    L, cbs = framework("lockstep")

    class Failing(make_module(L)):
        def training_step(self, batch, batch_idx):
            if self.global_step == 3:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    ckpt = cbs.ModelCheckpoint(dirpath=tmp_path, save_on_exception=True, every_n_epochs=5)
    with pytest.raises(RuntimeError, match="boom"):
        fit("lockstep", [ckpt], epochs=2, module=Failing())
    assert files_under(tmp_path) == ["epoch=0-step=3.ckpt"]
