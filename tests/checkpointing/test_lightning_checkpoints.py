"""Checkpoints cross between Lightning and Lockstep, both ways (differential).

A file Lightning wrote (at the end of epoch 0, in the middle of it, after ``max_steps``) resumed
with ``Trainer.fit(..., ckpt_path=...)`` on Lockstep ends where Lightning's own resume of it ends:
the same global step and epoch, the same parameters to 1e-5. A file Lockstep wrote resumes in
Lightning at Lockstep's epoch and step. Thirteen samples in batches of three (the last batch holds
one), shuffled.

Neither framework keeps the generator a shuffled loader draws from in Lightning's files, so each
resume starts from the same generator state: seeded (a Lightning file), or, for Lightning resuming
a Lockstep file, the state that file recorded (Lockstep restores it itself).
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.optional import importorskip
import callbacks as lockstep_callbacks
import trainer as lockstep
from trainer.rng import restore_rng_state

pl = importorskip("lightning.pytorch", reason="Lightning 2.x (the `dev` extra)")
QUIET = {"accelerator": "cpu", "logger": False, "enable_progress_bar": False, "enable_model_summary": False}


def _module(framework: Any) -> Any:
    class Regression(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Linear(3, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    return Regression()


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(13, 3, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True) + 0.1 * torch.randn(13, 1, generator=g)),
                      batch_size=3, shuffle=True)


def _write(framework: Any, callbacks: Any, directory: Path, **limits: Any) -> None:
    """A fit from scratch that saves at step 3 (mid-epoch), at the end of epoch 0 and after the fit."""
    torch.manual_seed(3)
    every_step = callbacks.ModelCheckpoint(dirpath=directory, every_n_train_steps=3, save_top_k=-1, filename="step")
    every_epoch = callbacks.ModelCheckpoint(dirpath=directory, every_n_epochs=1, save_top_k=-1, filename="epoch_end")
    t = framework.Trainer(callbacks=[every_step, every_epoch], **QUIET, **limits)
    t.fit(_module(framework), _loader())
    t.save_checkpoint(directory / "after_fit.ckpt")


def _resume(framework: Any, path: Path, rng: dict[str, Any] | None = None) -> tuple[int, int, torch.Tensor]:
    module = _module(framework)
    torch.manual_seed(7)
    if rng is not None:
        restore_rng_state(rng)
    t = framework.Trainer(max_epochs=2, enable_checkpointing=False, **QUIET)
    t.fit(module, _loader(), ckpt_path=path)
    return t.global_step, t.current_epoch, torch.cat([p.detach().flatten() for p in module.parameters()])


@pytest.fixture(scope="module")
def lightning_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    one_epoch, three_steps = tmp_path_factory.mktemp("lightning_epoch"), tmp_path_factory.mktemp("lightning_steps")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _write(pl, pl.callbacks, one_epoch, max_epochs=1)
        _write(pl, pl.callbacks, three_steps, max_steps=3)
    return {
        "end_of_epoch": one_epoch / "epoch_end.ckpt",
        "mid_epoch": one_epoch / "step.ckpt",
        "after_max_epochs": one_epoch / "after_fit.ckpt",
        "after_max_steps": three_steps / "after_fit.ckpt",
    }


@pytest.fixture(scope="module")
def lockstep_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    one_epoch, three_steps = tmp_path_factory.mktemp("lockstep_epoch"), tmp_path_factory.mktemp("lockstep_steps")
    _write(lockstep, lockstep_callbacks, one_epoch, max_epochs=1)
    _write(lockstep, lockstep_callbacks, three_steps, max_steps=3)
    return {
        "end_of_epoch": one_epoch / "epoch_end.ckpt",
        "mid_epoch": one_epoch / "step.ckpt",
        "after_max_epochs": one_epoch / "after_fit.ckpt",
        "after_max_steps": three_steps / "after_fit.ckpt",
    }


# where Lightning's own resume of each of its files ends (5 batches an epoch, max_epochs=2)
_LIGHTNING_ENDS = {"end_of_epoch": 10, "mid_epoch": 10, "after_max_epochs": 10, "after_max_steps": 8}


@pytest.mark.parametrize("which", sorted(_LIGHTNING_ENDS))
def test_a_lightning_checkpoint_resumes_on_lockstep_as_on_lightning(lightning_files, which):
    path = lightning_files[which]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = _resume(pl, path)
        ours = _resume(lockstep, path)
    assert theirs[:2] == (_LIGHTNING_ENDS[which], 2)
    assert ours[:2] == theirs[:2]
    torch.testing.assert_close(ours[2], theirs[2], rtol=0, atol=1e-5)


def test_a_mid_epoch_lightning_checkpoint_says_the_order_is_new(lightning_files):
    with pytest.warns(UserWarning, match="goes on at batch 3 over the first batches of a newly drawn order"):
        _resume(lockstep, lightning_files["mid_epoch"])


@pytest.mark.parametrize("which", ["end_of_epoch", "after_max_epochs"])
def test_a_lockstep_checkpoint_at_an_epoch_end_resumes_in_lightning_as_on_lockstep(lockstep_files, which):
    path = lockstep_files[which]
    ours = _resume(lockstep, path)
    saved = torch.load(path, weights_only=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = _resume(pl, path, rng=saved["rank_states"][0]["rng"])
    assert ours[:2] == (10, 2)
    assert theirs[:2] == ours[:2]
    torch.testing.assert_close(theirs[2], ours[2], rtol=0, atol=1e-5)


@pytest.mark.parametrize("which", ["mid_epoch", "after_max_steps"])
def test_a_lockstep_checkpoint_inside_an_epoch_resumes_in_lightning_at_its_step(lockstep_files, which):
    # Lightning goes on at the next batch, over a new order (it says so): the same steps and
    # epochs, other samples, so other parameters
    path = lockstep_files[which]
    ours = _resume(lockstep, path)
    with pytest.warns(UserWarning, match="ended before the epoch ended"):
        theirs = _resume(pl, path)
    assert theirs[:2] == ours[:2] == (10, 2)


class _FirstBatch(pl.Callback):
    """The epoch, step and batch index of the first batch Lightning trains; then the fit stops."""

    def __init__(self) -> None:
        self.first: tuple[int, int, int] | None = None

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        if self.first is None:
            self.first = (trainer.current_epoch, trainer.global_step, batch_idx)
        trainer.should_stop = True


@pytest.mark.parametrize("which, first", [
    ("end_of_epoch", (1, 5, 0)), ("after_max_epochs", (1, 5, 0)), ("mid_epoch", (0, 3, 3)), ("after_max_steps", (0, 3, 3)),
])
def test_lightning_continues_at_lockstep_s_position(lockstep_files, which, first):
    probe = _FirstBatch()
    t = pl.Trainer(max_epochs=2, callbacks=[probe], enable_checkpointing=False, **QUIET)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t.fit(_module(pl), _loader(), ckpt_path=lockstep_files[which])
    assert probe.first == first
