"""Callbacks and loggers with 2 real gloo ranks: one set of files, and the same decisions on
every rank even when the ranks' metric values differ."""

from __future__ import annotations

import os

import pytest

from tests.helpers.callbacks import Scripted, event_files, loader, scalars
from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET

pytestmark = pytest.mark.distributed


def _per_rank(rank0, rank1):
    return list(zip(rank0, rank1))


def _logger_and_checkpoint(rank, world_size, root):
    from callbacks import CSVLogger, ModelCheckpoint, TensorBoardLogger
    from trainer import Trainer

    ckpt = ModelCheckpoint(monitor="train_metric", save_top_k=1, save_last=True)
    loggers = [TensorBoardLogger(), CSVLogger()]  # one version for both, agreed by both ranks
    trainer = Trainer(accelerator="cpu",
        max_epochs=3, default_root_dir=root, log_every_n_steps=1, callbacks=[ckpt], logger=loggers
    )
    # train_metric is not synced: rank 0 ranks epoch 1 best, rank 1 would pick epoch 2
    module = Scripted(train_script=_per_rank([3.0, 1.0, 2.0], [1.0, 3.0, 0.0]))
    trainer.fit(module, loader(32, 8), loader(16, 8))  # 2 batches per rank per epoch
    bar = next(cb for cb in trainer.callbacks if type(cb).__name__ == "ProgressBar")
    return {
        "log_dir": trainer.log_dir,
        "csv_dir": loggers[1].log_dir,
        "writes": trainer.logger.is_global_zero,
        # (touching `experiment` on rank 0 would open a new event file after the run)
        "noop_experiment": rank != 0 and not trainer.logger.experiment,
        "bar": bar.is_enabled,
        "dirpath": ckpt.dirpath,
        "best_k_models": ckpt.best_k_models,
        "best_model_path": ckpt.best_model_path,
        "best_model_score": ckpt.best_model_score,
        "last_model_path": ckpt.last_model_path,
    }


def test_one_event_file_set_and_rank0_checkpoint_decisions(tmp_path):
    (tmp_path / "logs" / "version_0").mkdir(parents=True)  # an earlier run: both ranks must pick 1
    r0, r1 = run_ranks(_logger_and_checkpoint, world_size=2, args=(str(tmp_path),))

    log_dir = os.path.join(str(tmp_path), "logs", "version_1")
    assert r0["log_dir"] == r1["log_dir"] == r0["csv_dir"] == r1["csv_dir"] == log_dir
    assert os.path.isfile(os.path.join(log_dir, "metrics.csv"))
    assert (r0["writes"], r1["writes"]) == (True, False) and r1["noop_experiment"]
    assert (r0["bar"], r1["bar"]) == (True, False)
    files = event_files(tmp_path)
    assert len(files) == 1 and os.path.dirname(files[0]) == log_dir
    assert [s for s, _ in scalars(log_dir)["train_loss"]] == [0, 1, 2, 3, 4, 5]
    assert sorted(os.listdir(tmp_path / "logs")) == ["version_0", "version_1"]

    ckpt_dir = os.path.join(log_dir, "checkpoints")
    assert r0["dirpath"] == r1["dirpath"] == ckpt_dir
    assert sorted(os.listdir(ckpt_dir)) == ["epoch=1-step=4.ckpt", "last.ckpt"]
    for key in ("best_k_models", "best_model_path", "best_model_score", "last_model_path"):
        assert r0[key] == r1[key], key
    assert (
        r0["best_model_path"] == os.path.join(ckpt_dir, "epoch=1-step=4.ckpt")
        and r0["best_model_score"] == 1.0
    )


def _decisions(rank, world_size):
    from callbacks import EarlyStopping, ModelCheckpoint
    from trainer import Trainer

    # Alone, rank 0 never stops and rank 1 stops at epoch 2; the mean over ranks
    # (5, 0.5, 1, 1.5, ...) improves at epoch 1 and then not for 2 checks: stop at epoch 3.
    script = _per_rank([10, 0, -1, -2, -3, -4, -5, -6], [0, 1, 3, 5, 7, 9, 11, 13])
    results = []
    for monitor, module in (
        ("train_metric", Scripted(train_script=script)),
        ("val_metric", Scripted(val_script=script)),
    ):
        stopper = EarlyStopping(monitor, patience=2)
        trainer = Trainer(accelerator="cpu", max_epochs=8, callbacks=[stopper], num_sanity_val_steps=0, **QUIET)
        trainer.fit(module, loader(32, 8), loader(16, 8) if monitor == "val_metric" else None)
        results.append(
            (monitor, stopper.stopped_epoch, trainer.current_epoch, stopper.best_score, stopper.wait_count)
        )

    # EarlyStopping states that differ between ranks (patience 1 on rank 1 only) on the same mean:
    # rank 1 would stop after epoch 2 and rank 0 never; any rank stopping stops every rank
    stopper = EarlyStopping("val_metric", patience=1 if rank == 1 else 100)
    trainer = Trainer(accelerator="cpu", max_epochs=8, callbacks=[stopper], num_sanity_val_steps=0, **QUIET)
    trainer.fit(Scripted(val_script=script), loader(32, 8), loader(16, 8))
    results.append(("patience", stopper.stopped_epoch, trainer.current_epoch))

    # a bad monitor is found on rank 0, which decides alone: every rank must raise, none may hang
    trainer = Trainer(accelerator="cpu",
        max_epochs=1,
        callbacks=[ModelCheckpoint(monitor="val_acc")],
        **{**QUIET, "enable_checkpointing": True},
    )
    try:
        trainer.fit(Scripted(), loader(32, 8))
    except KeyError as err:
        results.append(str(err))
    return results


def test_early_stopping_and_checkpoint_errors_agree_on_every_rank():
    r0, r1 = run_ranks(_decisions, world_size=2)
    assert r0[:2] == r1[:2] == [("train_metric", 3, 4, 0.5, 2), ("val_metric", 3, 4, 0.5, 2)]
    assert r0[2] == r1[2] == ("patience", 2, 3)
    assert r0[3].startswith("ModelCheckpoint(monitor='val_acc') could not find 'val_acc'")
    assert r1[3] == f"ModelCheckpoint failed on global rank 0: {r0[3]}"


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_ddp_spawn_fit_then_validate_log_to_one_version_without_duplicate_points(tmp_path):
    # each call runs in new worker processes: the version and the points written must carry over
    from callbacks import CSVLogger, TensorBoardLogger
    from trainer import Trainer

    (tmp_path / "logs" / "version_0").mkdir(parents=True)  # an earlier run
    trainer = Trainer(
        max_epochs=1,
        default_root_dir=tmp_path,
        strategy="ddp_spawn",
        devices=2,
        accelerator="cpu",
        logger=[TensorBoardLogger(), CSVLogger()],
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    module = Scripted()
    trainer.fit(module, loader(32, 8), loader(16, 8))  # 2 steps
    [validated] = trainer.validate(module, loader(16, 8))
    # the same weights at the same step again (the fit's validation is a step before: Lightning's)
    assert trainer.validate(module, loader(16, 8)) == [validated]
    log_dir = os.path.join(str(tmp_path), "logs", "version_1")
    assert trainer.log_dir == trainer.loggers[1].log_dir == log_dir
    assert sorted(os.listdir(tmp_path / "logs")) == ["version_0", "version_1"]
    assert len(event_files(log_dir)) == 2  # one per call that writes: the second validate repeats the first
    val_loss = scalars(log_dir)["val_loss"]
    assert [step for step, _ in val_loss] == [1, 2]
    assert val_loss[-1][1] == pytest.approx(validated["val_loss"], rel=1e-6)
