"""`FitProgress` is a frozen value: the fit loop replaces it, at one place per event."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from callbacks import Callback
from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import Trainer
from trainer.contracts.progress import FitProgress

REPO = Path(__file__).resolve().parents[2]


def test_a_field_cannot_be_assigned():
    progress = FitProgress()
    with pytest.raises(dataclasses.FrozenInstanceError):
        progress.global_step = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        progress.samples_done = 8  # type: ignore[misc]


def test_each_transition_returns_a_new_value_and_leaves_the_old_one():
    start = FitProgress().epoch_started(0, samples_done=0, global_batch_size=8, dataset_size=20)
    trained = start.at_batch(0).stepped().batch_trained(0, is_last=False, samples_done=8)
    assert (start.global_step, start.batches_done, start.samples_done) == (0, 0, 0)
    assert (trained.global_step, trained.batches_done, trained.samples_done) == (1, 1, 8)
    ended = trained.batch_trained(1, is_last=True, samples_done=20).epoch_ending().next_epoch()
    assert (ended.current_epoch, ended.batches_done, ended.samples_done, ended.epoch_finished) == (1, 0, 0, False)
    assert trained.current_epoch == 0


def test_the_checkpoint_entries_round_trip_in_the_same_format():
    progress = FitProgress(current_epoch=2, global_step=9, batch_idx=4, batches_done=5, samples_done=40,
                           global_batch_size=8, dataset_size=96, batches_total=25)
    state = progress.state_dict()
    lightning = {"epoch_progress", "epoch_loop.batch_progress", "epoch_loop.automatic_optimization.optim_progress",
                 "epoch_loop.manual_optimization.optim_step_progress", "epoch_loop.state_dict"}
    fit_loop = state["loops"]["fit_loop"]
    assert lightning <= set(fit_loop)  # Lightning's counters beside ours: Lightning resumes from the file too
    assert {**state, "loops": {"fit_loop": {k: v for k, v in fit_loop.items() if k not in lightning}}} == {
        "epoch": 2, "global_step": 9, "loops": {"fit_loop": {
            "batches_done": 5, "epoch_finished": False, "batches_total": 25, "samples_done": 40, "global_batch_size": 8,
            "dataset_size": 96}}}
    assert FitProgress.from_state_dict(state) == dataclasses.replace(progress, batch_idx=5)
    old = {"epoch": 1, "global_step": 3, "loops": {"fit_loop": {"batches_done": 2, "epoch_finished": False}}}
    assert FitProgress.from_state_dict(old).samples_done is None  # a checkpoint without samples still loads


class _KeepsPositions(Callback):
    """Keeps the very objects `trainer.fit_progress` returns (no copies)."""

    def __init__(self):
        self.kept = []

    def on_train_epoch_start(self, trainer, module):
        self.kept.append(("epoch start", trainer.fit_progress))

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.kept.append(("batch start", trainer.fit_progress))

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.kept.append(("batch end", trainer.fit_progress))


def test_a_kept_position_stays_the_position_of_its_moment():
    keeper = _KeepsPositions()
    t = Trainer(accelerator="cpu", max_epochs=2, accumulate_grad_batches=2, callbacks=[keeper], **QUIET)
    t.fit(Regression(), loader(regression_data(24), 4))  # 6 batches, 3 steps per epoch
    seen = [(what, p.current_epoch, p.batch_idx, p.batches_done, p.global_step, p.samples_done)
            for what, p in keeper.kept]
    assert seen[:5] == [
        ("epoch start", 0, 0, 0, 0, None),  # the epoch starts (its layout known) after the hook
        ("batch start", 0, 0, 0, 0, 0),
        ("batch end", 0, 0, 1, 0, 0),
        ("batch start", 0, 1, 1, 0, 0),
        ("batch end", 0, 1, 2, 1, 8),  # the window's step: 8 samples of the epoch trained
    ]
    assert seen[12:15] == [("batch end", 0, 5, 6, 3, 24), ("epoch start", 1, 0, 0, 3, 0), ("batch start", 1, 0, 0, 3, 0)]
    assert seen[-1] == ("batch end", 1, 5, 6, 6, 24)
    assert (t.fit_progress.current_epoch, t.fit_progress.global_step) == (2, 6)


def _progress_replacements(path: Path) -> list[str]:
    """The transition each ``self.progress = self.progress.<transition>(...)`` in ``path`` calls."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and any(ast.unparse(t) == "self.progress" for t in node.targets):
            value = node.value
            if isinstance(value, ast.Call) and ast.unparse(value.func).startswith("self.progress."):
                found.append(value.func.attr)  # type: ignore[attr-defined]
    return found


def test_the_loop_replaces_the_position_at_one_place_per_event():
    transitions = _progress_replacements(REPO / "trainer" / "loops" / "fit_loop.py")
    assert sorted(transitions) == sorted(
        ["epoch_started", "at_batch", "stepped", "batch_trained", "epoch_ending", "next_epoch"]
    )
    # and no other module holds a position of its own to replace
    writers = sorted(
        path.relative_to(REPO).as_posix()
        for path in [*REPO.glob("trainer/**/*.py"), *REPO.glob("callbacks/**/*.py")]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "progress" for t in node.targets
        )
    )
    assert set(writers) == {"trainer/loops/fit_loop.py"}


def test_the_replacement_check_finds_a_second_place(tmp_path):
    sample = tmp_path / "loop.py"
    sample.write_text("def f(self):\n    self.progress = self.progress.stepped()\n    self.progress = self.progress.stepped()\n")
    assert _progress_replacements(sample) == ["stepped", "stepped"]
