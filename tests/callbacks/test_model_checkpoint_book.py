"""`ModelCheckpoint` keeps its book of kept checkpoints once (issue 43): Lightning's names
(``best_model_path``, ``best_k_models``, ``kth_value``...) are views of it, assignable as in
Lightning (libraries set ``best_model_path``, reset ``best_k_models``, write into it), and what
is assigned is what the next save ranks against and what a checkpoint records."""
from __future__ import annotations

import math
import os

import pytest

from callbacks import ModelCheckpoint
from tests.helpers.callbacks import Scripted, loader
from tests.helpers.models import QUIET
from trainer import Trainer

pytestmark = pytest.mark.timeout(120)


def test_the_lightning_names_read_and_write_one_book(tmp_path):
    ckpt = ModelCheckpoint(dirpath=tmp_path, monitor="val_metric", mode="max", save_top_k=2)
    assert (ckpt.best_k_models, ckpt.best_model_path, ckpt.best_model_score) == ({}, "", None)
    assert ckpt.kth_value == -math.inf  # the worst score in mode "max"
    given = str(tmp_path / "given.ckpt")
    ckpt.best_model_path = given  # as Lightning's Ray plugin hands a worker's best path back
    ckpt.best_k_models[given] = 0.5  # written into, as libraries do
    ckpt.current_score, ckpt.kth_best_model_path, ckpt.kth_value = 0.5, given, 0.5
    ckpt.best_model_score, ckpt.last_model_path = 0.5, str(tmp_path / "last.ckpt")
    state = ckpt.state_dict()
    assert state["best_k_models"] == {given: 0.5} and state["best_model_path"] == given
    assert (state["kth_best_model_path"], state["kth_value"], state["current_score"]) == (given, 0.5, 0.5)
    assert state["last_model_path"] == str(tmp_path / "last.ckpt")
    ckpt.best_k_models = {}  # reset, as some libraries do between phases
    assert ckpt.state_dict()["best_k_models"] == {} and ckpt.best_model_path == given


def test_an_assigned_book_is_what_the_next_save_ranks_against(tmp_path):
    directory = tmp_path / "ckpts"
    directory.mkdir()
    kept = str(directory / "kept.ckpt")
    ckpt = ModelCheckpoint(dirpath=directory, monitor="val_metric", save_top_k=1)
    ckpt.best_k_models = {kept: 0.1}
    ckpt.kth_best_model_path, ckpt.kth_value = kept, 0.1
    ckpt.best_model_path, ckpt.best_model_score = kept, 0.1
    trainer = Trainer(accelerator="cpu", max_epochs=2, callbacks=[ckpt], num_sanity_val_steps=0,
                      **{**QUIET, "enable_checkpointing": True})
    trainer.fit(Scripted(val_script=[5.0, 4.0]), loader(16, 8), loader(8, 8))
    # no epoch's value beat the kept 0.1: nothing was written, the book is as assigned
    assert [name for name in os.listdir(directory) if name.endswith(".ckpt")] == []
    assert ckpt.best_k_models == {kept: 0.1} and ckpt.best_model_path == kept and ckpt.current_score == 4.0
