"""ModelCheckpoint: names, top-k bookkeeping, when it saves, last.ckpt, atomic writes, resuming."""

from __future__ import annotations

import math
import os

import pytest
import torch

from callbacks import Callback, ModelCheckpoint
from tests.helpers.callbacks import Scripted, loader
from tests.helpers.models import QUIET
from trainer import Trainer

# 2 training batches per epoch: steps 2, 4, 6, ... end the epochs
TRAIN, VAL = (16, 8), (8, 8)


def _fit(ckpt, module, epochs, tmp_path=None, val=True, **kwargs):
    opts = {**QUIET, "enable_checkpointing": True, "num_sanity_val_steps": 0, **kwargs}
    trainer = Trainer(accelerator="cpu", max_epochs=epochs, callbacks=[ckpt], default_root_dir=tmp_path, **opts)
    trainer.fit(module, loader(*TRAIN), loader(*VAL) if val else None)
    return trainer


def _files(directory):
    return sorted(os.listdir(directory))


def _load(path):
    return torch.load(path, weights_only=True)


# -- names and arguments ------------------------------------------------------------------------
def test_format_checkpoint_name(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path, filename="{epoch}-{val_loss:.2f}")
    metrics = {"epoch": 3, "step": 40, "val_loss": torch.tensor(0.1234)}
    assert ckpt.format_checkpoint_name(metrics) == os.path.join(str(tmp_path), "epoch=3-val_loss=0.12.ckpt")
    assert ckpt.format_checkpoint_name(metrics, ver=2).endswith("epoch=3-val_loss=0.12-v2.ckpt")
    ckpt = ModelCheckpoint(
        dirpath=tmp_path, filename="model-{step:05d}-{val/acc:.1f}", auto_insert_metric_name=False
    )
    assert (
        os.path.basename(ckpt.format_checkpoint_name({"step": 40, "val/acc": 0.91})) == "model-00040-0.9.ckpt"
    )
    # as Lightning: a "/" in a metric name makes a sub-directory
    ckpt = ModelCheckpoint(dirpath=tmp_path, filename="{epoch}-{val/acc:.1f}")
    assert ckpt.format_checkpoint_name({"epoch": 1, "val/acc": 0.91}) == os.path.join(
        str(tmp_path), "epoch=1-val", "acc=0.9.ckpt"
    )
    assert ckpt.format_checkpoint_name({"epoch": 1}, filename="{epoch:03d}", prefix="run") == os.path.join(
        str(tmp_path), "run-epoch=001.ckpt"
    )


def test_filename_field_missing_from_metrics(tmp_path):
    # as Lightning: written as 0, here with a warning that names the field
    ckpt = ModelCheckpoint(dirpath=tmp_path, filename="{epoch}-{val_acc:.2f}")
    with pytest.warns(UserWarning, match=r"refers to 'val_acc', which is not in the logged metrics \(available: epoch, step, val_loss\)"):
        path = ckpt.format_checkpoint_name({"epoch": 1, "step": 2, "val_loss": 0.5})
    assert os.path.basename(path) == "epoch=1-val_acc=0.00.ckpt"


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            {"mode": "best"},
            ValueError,
            r"ModelCheckpoint\(mode='best'\) is not supported: use 'min' or 'max'",
        ),
        ({"save_top_k": -2}, ValueError, r"save_top_k\) must be an int >= -1, got -2"),
        ({"save_top_k": 1.5}, TypeError, r"save_top_k\) must be an int >= -1, got 1.5"),
        ({"save_top_k": 3}, ValueError, r"save_top_k=3, monitor=None\): there is no metric to rank"),
        ({"every_n_train_steps": -1}, ValueError, r"every_n_train_steps\) must be None or an int >= 0, got -1"),
        ({"every_n_epochs": -2}, ValueError, r"every_n_epochs\) must be None or an int >= 0, got -2"),
        ({"filename": 3}, TypeError, r"filename=3\): expected a str template"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        ModelCheckpoint(**kwargs)


# -- top k ----------------------------------------------------------------------------------------
def test_top_k_by_validation_metric(tmp_path):
    ckpt = ModelCheckpoint(
        dirpath=tmp_path,
        filename="{epoch}-{val_metric:.2f}",
        monitor="val_metric",
        save_top_k=2,
        save_last=True,
    )
    _fit(ckpt, Scripted(val_script=[5.0, 3.0, 4.0, 1.0, 2.0]), epochs=5)
    assert _files(tmp_path) == ["epoch=3-val_metric=1.00.ckpt", "epoch=4-val_metric=2.00.ckpt", "last.ckpt"]
    best = os.path.join(str(tmp_path), "epoch=3-val_metric=1.00.ckpt")
    assert ckpt.best_model_path == best and ckpt.best_model_score == 1.0
    assert ckpt.kth_best_model_path.endswith("epoch=4-val_metric=2.00.ckpt") and ckpt.kth_value == 2.0
    assert ckpt.last_model_path == os.path.join(str(tmp_path), "last.ckpt")
    assert ckpt.best_k_models == {best: 1.0, ckpt.kth_best_model_path: 2.0}
    saved = _load(best)
    assert saved["epoch"] == 3 and saved["global_step"] == 8
    # the file records itself as the best one
    assert saved["callbacks"][ckpt.state_key]["best_model_path"] == best
    assert _load(ckpt.last_model_path)["global_step"] == 10


def test_mode_max(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path, monitor="val_metric", mode="max", save_top_k=1)
    _fit(ckpt, Scripted(val_script=[1.0, 3.0, 2.0]), epochs=3)
    assert _files(tmp_path) == ["epoch=1-step=4.ckpt"] and ckpt.best_model_score == 3.0


def test_nan_is_never_best(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path, monitor="val_metric", save_top_k=1)
    _fit(ckpt, Scripted(val_script=[2.0, float("nan"), 3.0]), epochs=3)
    assert _files(tmp_path) == ["epoch=0-step=2.ckpt"] and ckpt.current_score == 3.0


def test_train_metric_is_ranked_at_train_epoch_end(tmp_path):
    # at validation end the train metric still holds the previous epoch's value; ranking there
    # would pick epoch 4 (stale 1.0) instead of epoch 3
    ckpt = ModelCheckpoint(dirpath=tmp_path, monitor="train_metric", save_top_k=1)
    _fit(ckpt, Scripted(train_script=[5.0, 3.0, 4.0, 1.0, 2.0], val_script=[9.0] * 5), epochs=5)
    assert _files(tmp_path) == ["epoch=3-step=8.ckpt"] and ckpt.best_model_score == 1.0


class _ValByStep(Scripted):
    def validation_step(self, batch, batch_idx):
        self.log("val_metric", {2: 3.0, 4: 1.0, 6: 2.0, 8: 0.5}[self.global_step])


def test_validation_metric_is_ranked_at_each_validation(tmp_path):
    ckpt = ModelCheckpoint(
        dirpath=tmp_path, monitor="val_metric", save_top_k=2, filename="{step}-{val_metric:.1f}"
    )
    trainer = Trainer(accelerator="cpu",
        max_epochs=1,
        callbacks=[ckpt],
        val_check_interval=2,
        num_sanity_val_steps=0,
        **{**QUIET, "enable_checkpointing": True},
    )
    trainer.fit(_ValByStep(), loader(32, 4), loader(8, 8))  # validation after steps 2, 4, 6, 8
    assert _files(tmp_path) == ["step=4-val_metric=1.0.ckpt", "step=8-val_metric=0.5.ckpt"]


def test_validation_metric_before_first_validation_is_not_an_error(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path, monitor="val_metric", save_top_k=1, save_last=True)
    _fit(ckpt, Scripted(val_script=[9.0, 2.0, 9.0, 1.0]), epochs=4, check_val_every_n_epoch=2)
    assert _files(tmp_path) == ["epoch=3-step=8.ckpt", "last.ckpt"]


def test_monitor_missing_lists_available_keys(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path, monitor="val_acc")
    with pytest.raises(
        KeyError,
        match=r"ModelCheckpoint\(monitor='val_acc'\) could not find 'val_acc' in the "
        r"logged metrics\. Available keys: epoch, step, train_loss, val_loss\.",
    ):
        _fit(ckpt, Scripted(), epochs=1)


# -- without a monitor ----------------------------------------------------------------------------
def test_default_callback_keeps_latest_in_log_dir(tmp_path):
    trainer = Trainer(accelerator="cpu", max_epochs=2, default_root_dir=tmp_path, enable_progress_bar=False)
    trainer.fit(Scripted(), loader(*TRAIN))
    ckpt = trainer.checkpoint_callback
    assert isinstance(ckpt, ModelCheckpoint)
    directory = os.path.join(trainer.log_dir, "checkpoints")
    assert ckpt.dirpath == directory and trainer.log_dir.endswith(os.path.join("logs", "version_0"))
    # last.ckpt: a link to the newest file (no second write), so that ckpt_path="last" resumes
    assert _files(directory) == ["epoch=1-step=4.ckpt", "last.ckpt"]
    assert os.readlink(os.path.join(directory, "last.ckpt")) == "epoch=1-step=4.ckpt"
    assert ckpt.best_model_path == os.path.join(directory, "epoch=1-step=4.ckpt")
    again = Trainer(accelerator="cpu", max_epochs=3, default_root_dir=tmp_path, enable_progress_bar=False)
    again.fit(Scripted(), loader(*TRAIN), ckpt_path="last")
    assert again.global_step == 6 and again.log_dir.endswith("version_1")


def test_without_logger_saves_under_root(tmp_path):
    trainer = Trainer(accelerator="cpu", max_epochs=1, default_root_dir=tmp_path, logger=False, enable_progress_bar=False)
    trainer.fit(Scripted(), loader(*TRAIN))
    assert _files(os.path.join(str(tmp_path), "checkpoints")) == ["epoch=0-step=2.ckpt", "last.ckpt"]


def test_every_n_train_steps(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, every_n_epochs=0, save_top_k=-1)
    _fit(ckpt, Scripted(), epochs=4)  # 8 steps
    assert _files(tmp_path) == ["epoch=1-step=3.ckpt", "epoch=2-step=6.ckpt"]
    assert ckpt.best_model_path.endswith("epoch=2-step=6.ckpt")


def test_every_n_train_steps_saves_once_per_step_with_accumulation(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, every_n_epochs=0, save_top_k=-1)
    trainer = Trainer(accelerator="cpu",
        max_epochs=1,
        callbacks=[ckpt],
        accumulate_grad_batches=2,
        **{**QUIET, "enable_checkpointing": True},
    )
    trainer.fit(Scripted(), loader(32, 4))  # 8 micro batches, 4 optimizer steps
    assert _files(tmp_path) == [f"epoch=0-step={s}.ckpt" for s in (1, 2, 3, 4)]


def test_same_name_gets_version_suffix(tmp_path):
    ckpt = ModelCheckpoint(
        dirpath=tmp_path, filename="{epoch}", every_n_train_steps=1, every_n_epochs=0, save_top_k=-1
    )
    _fit(ckpt, Scripted(), epochs=1, val=False)
    assert _files(tmp_path) == ["epoch=0-v1.ckpt", "epoch=0.ckpt"]


def test_save_top_k_zero_saves_only_last(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path, save_top_k=0, save_last=True)
    _fit(ckpt, Scripted(), epochs=2)
    assert _files(tmp_path) == ["last.ckpt"] and ckpt.best_model_path == ""


# -- atomic writes and resuming -------------------------------------------------------------------
class _ExplodesWhenPickled:
    def __reduce__(self):
        raise RuntimeError("pickler exploded halfway")


class _PoisonCheckpointsFrom(Callback):
    """From ``step`` on, put an object into the checkpoint that makes ``torch.save`` raise
    after the model weights were already pickled."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_save_checkpoint(self, trainer, module, checkpoint):
        if trainer.global_step >= self.step:
            checkpoint["zz_poison"] = [torch.zeros(1000), _ExplodesWhenPickled()]


def test_crash_mid_write_keeps_previous_checkpoints(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, every_n_epochs=0, save_last=True)
    trainer = Trainer(accelerator="cpu",
        max_epochs=3,
        callbacks=[_PoisonCheckpointsFrom(6), ckpt],
        **{**QUIET, "enable_checkpointing": True},
    )
    with pytest.raises(RuntimeError, match="pickler exploded halfway"):
        trainer.fit(Scripted(), loader(*TRAIN))
    # step 6's top-1 save failed: the step-4 file it was about to replace is intact
    assert _files(tmp_path) == ["epoch=1-step=4.ckpt", "last.ckpt"]  # no temporary file left
    assert _load(tmp_path / "epoch=1-step=4.ckpt")["global_step"] == 4
    assert _load(tmp_path / "last.ckpt")["global_step"] == 4
    assert ckpt.best_model_path == os.path.join(str(tmp_path), "epoch=1-step=4.ckpt")  # rolled back


@pytest.mark.filterwarnings("ignore:The checkpoint was saved in the middle of an epoch")
def test_state_dict_round_trip_and_resume(tmp_path):
    script = [5.0, 3.0, 4.0, 1.0, 2.0, 0.5]
    ckpt = ModelCheckpoint(dirpath=tmp_path, monitor="val_metric", save_top_k=2, save_last=True)
    _fit(ckpt, Scripted(val_script=script), epochs=3)
    assert _files(tmp_path) == ["epoch=1-step=4.ckpt", "epoch=2-step=6.ckpt", "last.ckpt"]

    state = ckpt.state_dict()
    fresh = ModelCheckpoint(dirpath=tmp_path, monitor="val_metric", save_top_k=2, save_last=True)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state

    # resume: the restored top-k keeps ranking against the first run's files
    resumed = ModelCheckpoint(dirpath=tmp_path, monitor="val_metric", save_top_k=2, save_last=True)
    trainer = Trainer(accelerator="cpu",
        max_epochs=6,
        callbacks=[resumed],
        num_sanity_val_steps=0,
        **{**QUIET, "enable_checkpointing": True},
    )
    trainer.fit(
        Scripted(val_script=script), loader(*TRAIN), loader(*VAL), ckpt_path=str(tmp_path / "last.ckpt")
    )
    # the first run's files were ranked too (and deleted); only the epoch prefix is checked, the
    # step depends on where the Trainer resumes an epoch-end checkpoint
    assert [name.split("-step=")[0] for name in _files(tmp_path)] == ["epoch=3", "epoch=5", "last.ckpt"]
    assert resumed.best_model_score == 0.5 and resumed.kth_value == 1.0


def test_state_from_another_directory_keeps_only_best_path(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path / "a", monitor="val_metric")
    with pytest.warns(UserWarning, match="the checkpoint directory changed"):
        ckpt.load_state_dict(
            {
                "dirpath": str(tmp_path / "b"),
                "best_model_path": "b/x.ckpt",
                "best_k_models": {"b/x.ckpt": 1.0},
                "best_model_score": 1.0,
            }
        )
    assert ckpt.best_model_path == "b/x.ckpt" and ckpt.best_k_models == {} and ckpt.best_model_score is None
    assert math.isinf(ckpt.kth_value)


def test_second_fit_of_a_finished_trainer_writes_nothing_and_says_why(tmp_path, capsys):
    # as in Lightning: the fit reached max_epochs, so a second fit trains (and saves) nothing
    ckpt = ModelCheckpoint(dirpath=tmp_path, save_top_k=-1)
    trainer = Trainer(accelerator="cpu", max_epochs=1, callbacks=[ckpt], **{**QUIET, "enable_checkpointing": True})
    trainer.fit(Scripted(), loader(*TRAIN))
    capsys.readouterr()
    trainer.fit(Scripted(), loader(*TRAIN))
    assert "fit stopped at once: this Trainer's last fit reached max_epochs=1" in capsys.readouterr().out
    assert _files(tmp_path) == ["epoch=0-step=2.ckpt"]
    assert trainer.global_step == 2


def _crafted_state_checkpoint(tmp_path):
    """A checkpoint of an ordinary run (loads with weights_only=True) whose ModelCheckpoint state
    names paths outside the callback's directory: a directory of someone else's to evict, a
    file to overwrite as last.ckpt, and an escape through ``..``."""
    ckpts = tmp_path / "run" / "ckpts"
    first = ModelCheckpoint(dirpath=ckpts, monitor="val_metric", save_top_k=1, save_last=True)
    _fit(first, Scripted(val_script=[5.0, 4.0, 3.0, 2.0]), epochs=1)
    victims = {"dir": tmp_path / "theirs", "file": tmp_path / "notes.txt", "escape": ckpts / ".." / "other.ckpt"}
    victims["dir"].mkdir()
    (victims["dir"] / "data.bin").write_bytes(b"keep me")
    victims["file"].write_text("keep me")
    victims["escape"].write_text("keep me")
    checkpoint = _load(ckpts / "last.ckpt")
    state = checkpoint["callbacks"][first.state_key]
    worst = str(victims["dir"])  # ranked worst: the first to be evicted
    state.update(
        best_k_models={worst: 100.0, str(victims["escape"]): 50.0},
        kth_best_model_path=worst, kth_value=100.0,
        best_model_path=str(victims["escape"]), best_model_score=50.0,
        last_model_path=str(victims["file"]),
    )
    crafted = tmp_path / "crafted.ckpt"
    torch.save(checkpoint, crafted)
    return ckpts, crafted, first.state_key, victims


def _untouched(victims):
    return (
        (victims["dir"] / "data.bin").read_bytes() == b"keep me"
        and victims["file"].read_text() == "keep me"
        and victims["escape"].read_text() == "keep me"
    )


def test_a_loaded_state_naming_paths_outside_the_directory_deletes_and_overwrites_nothing(tmp_path):
    ckpts, crafted, _, victims = _crafted_state_checkpoint(tmp_path)
    resumed = ModelCheckpoint(dirpath=ckpts, monitor="val_metric", save_top_k=1, save_last=True)
    trainer = Trainer(accelerator="cpu", max_epochs=4, callbacks=[resumed], num_sanity_val_steps=0,
                      **{**QUIET, "enable_checkpointing": True})
    with pytest.warns(UserWarning, match=r"names paths outside its directory .*ckpts'") as caught:
        trainer.fit(Scripted(val_script=[5.0, 4.0, 3.0, 2.0]), loader(*TRAIN), loader(*VAL), ckpt_path=str(crafted))
    message = next(str(w.message) for w in caught if "outside its directory" in str(w.message))
    assert all(str(path) in message for path in victims.values()) and "they are dropped" in message
    assert _untouched(victims)
    # the run kept its own books, in its directory (last.ckpt, no longer named by the state, is
    # another run's file to it: kept, and its own last is last-v1.ckpt)
    assert resumed.last_model_path == str(ckpts / "last-v1.ckpt")
    assert set(resumed.best_k_models) == {resumed.best_model_path} and resumed.best_model_path.startswith(str(ckpts))
    assert resumed.best_model_score == 2.0


class _Evaluated(Scripted):
    test_step = Scripted.validation_step

    def predict_step(self, batch, batch_idx):
        return batch[0]


def test_a_crafted_state_is_harmless_through_every_entry_point(tmp_path):
    """Evaluation and loading do not apply callback states; fit does, and drops what is foreign."""
    ckpts, crafted, key, victims = _crafted_state_checkpoint(tmp_path)
    module = _Evaluated(val_script=[1.0])
    for stage in ("validate", "test", "predict"):
        callback = ModelCheckpoint(dirpath=ckpts, monitor="val_metric", save_top_k=1, save_last=True)
        trainer = Trainer(accelerator="cpu", callbacks=[callback], **{**QUIET, "enable_checkpointing": True})
        getattr(trainer, stage)(module, loader(*VAL), ckpt_path=str(crafted))
        assert callback.best_k_models == {} and callback.last_model_path == ""
    Scripted.load_from_checkpoint(crafted)
    direct = ModelCheckpoint(dirpath=ckpts, monitor="val_metric", save_top_k=1, save_last=True)
    with pytest.warns(UserWarning, match="dropped"):
        direct.load_state_dict(_load(crafted)["callbacks"][key])
    assert direct.best_k_models == {} and direct.last_model_path == "" and direct.best_model_path == ""
    assert _untouched(victims)
