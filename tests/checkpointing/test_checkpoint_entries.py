"""Every checkpoint entry the Trainer reads is type-checked when the file is loaded: a damaged or
crafted one is a `CheckpointError` naming the file and the entry, before anything is restored."""
from __future__ import annotations

import re
import warnings

import pytest
import torch

from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import Trainer, seed_everything
from trainer.checkpoint_io.file_format import CheckpointError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def saved(tmp_path):
    """A checkpoint written after 3 steps of the 8 of an epoch (64 samples, batch 8), shuffled."""
    seed_everything(0)
    trainer = Trainer(accelerator="cpu", max_steps=3, **QUIET)
    trainer.fit(Regression(), loader(regression_data(), 8, shuffle=True))
    path = tmp_path / "good.ckpt"
    trainer.save_checkpoint(path)
    return path


def _crafted(saved, entry, value):
    checkpoint = torch.load(saved, weights_only=True)
    *parents, last = entry.split(".")
    holder = checkpoint
    for part in parents:
        holder = holder[int(part)] if isinstance(holder, list) else holder[part]
    holder[last] = value
    path = saved.parent / "crafted.ckpt"
    torch.save(checkpoint, path)
    return path


def _message(entry, expected, value):
    return (rf"Checkpoint '.*crafted\.ckpt': its entry '{re.escape(entry)}' must be {re.escape(expected)}, got "
            rf"{re.escape(repr(value))}\. The file is damaged")


# (entry, value, what it must be): the three, then every other entry the Trainer reads
CASES = [
    ("hyper_parameters_as_text", 5, "None or a list of str"),
    ("hyper_parameters", "abc", "None or a dict keyed by str"),
    ("loops.fit_loop.dataset_size", "abc", "None or an int >= 0"),
    ("loops.fit_loop.batches_done", -1, "an int >= 0"),
    ("loops.fit_loop.samples_done", 2.5, "None or an int >= 0"),
    ("loops.fit_loop.global_batch_size", 0, "None or an int >= 1"),
    ("loops.fit_loop.epoch_finished", "no", "a bool"),
    ("loops.fit_loop.shuffle", "yes", "None or a bool"),
    ("loops.fit_loop.batches_total", -1, "None or an int >= 0"),
    ("loops.fit_loop", [1], "a dict"),
    ("loops", "abc", "a dict"),
    ("epoch", "1", "an int >= 0"),
    ("global_step", True, "an int >= 0"),
    ("world_size", 0, "an int >= 1"),
    ("accumulate_grad_batches", "2", "an int >= 1"),
    ("lr_scaled", 1, "a bool"),
    ("run_id", 5, "None or a str"),
    ("run_attempt", -1, "an int >= 0"),
    ("hparams_name", 5, "None or a str"),
    ("hyper_parameters_pickled", "abc", "None or a 1-d uint8 tensor"),
    ("hyper_parameters", {1: 2}, "None or a dict keyed by str"),
    ("optimizer_states", {"a": 1}, "a list of dicts"),
    ("optimizer_classes", [5], "a list of str"),
    ("lr_schedulers", [5], "a list of dicts"),
    ("callbacks", [], "a dict keyed by str"),
    ("rank_states", [5], "a list of dicts or None"),
    ("rank_states.0.epoch_state", "abc", "None or a dict"),
    ("state_dict", [1], "a dict"),
    ("format_version", "2", "an int >= 1"),
]


@pytest.mark.parametrize("entry, value, expected", CASES, ids=[c[0] + "=" + repr(c[1]) for c in CASES])
def test_a_wrong_entry_is_refused_naming_the_file_and_the_entry(saved, entry, value, expected):
    path = _crafted(saved, entry, value)
    model = Regression()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = Trainer(accelerator="cpu", max_steps=6, **QUIET)
    with pytest.raises(CheckpointError, match=_message(entry, expected, value)):
        trainer.fit(model, loader(regression_data(), 8, shuffle=True), ckpt_path=path)
    assert trainer.global_step == 0 and all(torch.equal(a, b) for a, b in zip(model.parameters(), before))
    with pytest.raises(CheckpointError, match=_message(entry, expected, value)):
        Regression.load_from_checkpoint(path)


def test_lightning_s_counters_are_checked_in_a_file_lightning_wrote(saved):
    checkpoint = torch.load(saved, weights_only=True)
    fit_loop = checkpoint["loops"]["fit_loop"]
    for ours in ("batches_done", "epoch_finished", "batches_total", "samples_done", "global_batch_size",
                 "dataset_size", "shuffle"):
        fit_loop.pop(ours, None)  # what is left is the layout Lightning writes
    fit_loop["epoch_progress"]["current"]["processed"] = "1"
    path = saved.parent / "crafted.ckpt"
    torch.save(checkpoint, path)
    value = fit_loop["epoch_progress"]["current"]
    with pytest.raises(CheckpointError, match=_message("loops.fit_loop.epoch_progress.current", "a dict of ints >= 0", value)):
        Trainer(accelerator="cpu", max_steps=6, **QUIET).fit(Regression(), loader(regression_data(), 8), ckpt_path=path)


def test_the_checkpoint_as_written_loads(saved):
    trainer = Trainer(accelerator="cpu", max_steps=6, **QUIET)
    trainer.fit(Regression(), loader(regression_data(), 8, shuffle=True), ckpt_path=saved)
    assert trainer.global_step == 6
    assert Regression.load_from_checkpoint(saved).hparams["lr"] == 0.05


# -- shuffle changed between save and resume: accepted, as Lightning does, and warned ----------
def _resume_with(saved, shuffle):
    trainer = Trainer(accelerator="cpu", max_steps=10, **QUIET)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Regression(), loader(regression_data(), 8, shuffle=shuffle), ckpt_path=saved)
    assert trainer.global_step == 10
    return [str(w.message) for w in caught if "shuffle=" in str(w.message)]


def test_a_resume_with_another_shuffle_mid_epoch_is_warned(saved):
    [said] = _resume_with(saved, shuffle=False)
    assert re.search(r"Checkpoint '.*good\.ckpt' was written with a train loader of shuffle=True; this run's has "
                     r"shuffle=False\. The rest of the interrupted epoch follows the new order, so some of its samples "
                     r"are trained twice and others not at all", said), said
    assert _resume_with(saved, shuffle=True) == []


def test_a_resume_with_another_shuffle_at_an_epoch_end_is_warned(tmp_path):
    trainer = Trainer(accelerator="cpu", max_epochs=1, **QUIET)
    trainer.fit(Regression(), loader(regression_data(), 8, shuffle=False))
    trainer.save_checkpoint(tmp_path / "end.ckpt")
    [said] = _resume_with(tmp_path / "end.ckpt", shuffle=True)
    assert "written with a train loader of shuffle=False; this run's has shuffle=True. The next epochs" in said
    assert _resume_with(tmp_path / "end.ckpt", shuffle=False) == []
