"""Trainer conveniences from Lightning: fast_dev_run, max_time (Timer), overfit_batches, the model
summary and reload_dataloaders_every_n_epochs."""
from __future__ import annotations

import datetime

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Subset

from callbacks import ModelCheckpoint, ModelSummary, Timer
from callbacks.model_summary import summarize
from trainer.contracts.duration import parse_duration
from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET, Regression, assert_params_close, loader, params_of, regression_data
from trainer import Trainer


class Recording(Regression):
    """Records the first target of every training and validation batch, and loader hook calls."""

    def __init__(self, data=None, **kw):
        super().__init__(**kw)
        self.data = data
        self.train_seen: list[float] = []
        self.val_seen: list[float] = []
        self.loader_calls = {"train": 0, "val": 0}

    def training_step(self, batch, batch_idx):
        self.train_seen.append(round(float(batch[1][0]), 6))
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.val_seen.append(round(float(batch[1][0]), 6))
        super().validation_step(batch, batch_idx)

    def train_dataloader(self):
        self.loader_calls["train"] += 1
        return loader(self.data, 4)

    def val_dataloader(self):
        self.loader_calls["val"] += 1
        return loader(self.data, 4)


# -- fast_dev_run ----------------------------------------------------------------------------
class BrokenValidation(Regression):
    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        raise RuntimeError("broken validation_step")


def test_fast_dev_run_surfaces_a_broken_validation_step_before_any_epoch_completes(tmp_path):
    trainer = Trainer(accelerator="cpu", max_epochs=100, fast_dev_run=True, default_root_dir=tmp_path,
                      enable_progress_bar=False)
    data = loader(regression_data(4096), 4)  # 1024 batches: a full epoch would be long
    with pytest.raises(RuntimeError, match="broken validation_step"):
        trainer.fit(BrokenValidation(), data, data)
    assert trainer.global_step <= 1
    assert trainer.current_epoch == 0


def test_fast_dev_run_n_runs_n_batches_of_every_stage_and_writes_nothing(tmp_path, capsys):
    module = Recording(regression_data(64))
    trainer = Trainer(accelerator="cpu", max_epochs=5, fast_dev_run=3, default_root_dir=tmp_path,
                      enable_progress_bar=False, callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt")])
    assert "fast_dev_run=3" in capsys.readouterr().out
    trainer.fit(module)
    assert (len(module.train_seen), len(module.val_seen)) == (3, 3)  # no sanity check: 3, not 3 + 2
    assert (trainer.global_step, trainer.current_epoch) == (3, 1)
    assert trainer.loggers == [] and trainer.checkpoint_callbacks == []
    assert len(trainer.predict(module, loader(regression_data(64), 4))) == 3
    assert trainer.test(module, loader(regression_data(64), 4))[0]["test_loss"] > 0
    assert list(tmp_path.iterdir()) == []  # no logs, no checkpoints


# -- max_time and Timer -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "value, expected",
    [
        ("01:02:03:04", datetime.timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ({"hours": 1, "minutes": 30}, datetime.timedelta(hours=1, minutes=30)),
        (datetime.timedelta(seconds=5), datetime.timedelta(seconds=5)),
        (None, None),
    ],
)
def test_max_time_formats(value, expected):
    assert parse_duration("max_time", value) == expected
    trainer = Trainer(accelerator="cpu", max_time=value, **QUIET)
    timers = [cb for cb in trainer.callbacks if isinstance(cb, Timer)]
    assert [t.duration for t in timers] == ([expected] if expected is not None else [])
    assert trainer.max_epochs == (-1 if expected is not None else 1000)  # the time is the limit


def test_max_time_spent_stops_training_after_the_step_that_found_it():
    trainer = Trainer(accelerator="cpu", max_epochs=5, max_time={"seconds": 0}, **QUIET)
    trainer.fit(Regression(), loader(regression_data(32), 4))  # 8 batches per epoch
    # the first check (after batch 0) finds the budget spent: the epoch ends there, with its hooks
    assert (trainer.global_step, trainer.current_epoch) == (1, 1)


def test_timer_with_an_interval_of_epochs_stops_at_the_epoch_end():
    trainer = Trainer(accelerator="cpu", max_epochs=5, callbacks=[Timer({"seconds": 0}, interval="epoch")], **QUIET)
    trainer.fit(Regression(), loader(regression_data(32), 4))
    assert (trainer.global_step, trainer.current_epoch) == (8, 1)


def test_timer_state_resumes_the_spent_budget(tmp_path):
    data = loader(regression_data(32), 4)
    first = Timer({"hours": 1})
    trainer = Trainer(accelerator="cpu", max_epochs=1, callbacks=[first], **QUIET)
    trainer.fit(Regression(), data)
    path = tmp_path / "a.ckpt"
    trainer.save_checkpoint(path)
    spent = first.state_dict()["time_elapsed"]["train"]
    assert spent > 0 and first.time_remaining() == pytest.approx(3600 - spent)

    # a saved budget of 2 hours already spent: the resumed run stops after its first step
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["callbacks"]["Timer"]["time_elapsed"]["train"] = 7200.0
    torch.save(checkpoint, path)
    second = Timer({"hours": 1})
    trainer = Trainer(accelerator="cpu", max_epochs=5, callbacks=[second], **QUIET)
    trainer.fit(Regression(), data, ckpt_path=path)
    assert (trainer.global_step, trainer.current_epoch) == (8 + 1, 2)
    assert second.time_elapsed() >= 7200.0


def test_timer_clocks_each_stage_from_its_start_to_its_end_hook():
    timer = Timer({"hours": 1})
    trainer = Trainer(accelerator="cpu", max_epochs=1, callbacks=[timer], **QUIET)
    data = loader(regression_data(16), 4)
    module = Regression()
    trainer.fit(module, data)
    trainer.validate(module, data, verbose=False)
    trainer.test(module, data, verbose=False)
    for stage in ("train", "validate", "test"):
        start, end = timer.start_time(stage), timer.end_time(stage)
        assert start is not None and end is not None and end >= start, stage
        assert timer.time_elapsed(stage) == pytest.approx(end - start, abs=1e-9), stage
    assert timer.start_time("predict") is None and timer.time_elapsed("predict") == 0.0


def _timer_on_one_rank(rank, world_size):
    timer = Timer({"hours": 1})
    if rank == 1:  # only rank 1's budget is spent
        timer.load_state_dict({"time_elapsed": {"train": 7200.0}})
    trainer = Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=3, callbacks=[timer], **QUIET)
    trainer.fit(Regression(), loader(regression_data(64), 4))  # 8 batches per rank per epoch
    return trainer.global_step, trainer.current_epoch


@pytest.mark.distributed
def test_timer_stops_every_rank_at_the_same_step():
    assert run_ranks(_timer_on_one_rank, world_size=2) == [(1, 1), (1, 1)]


# -- overfit_batches --------------------------------------------------------------------------
@pytest.mark.parametrize("overfit", [2, 0.25])
def test_overfit_batches_trains_and_validates_on_the_same_first_batches(overfit):
    data = regression_data(32)  # 8 batches of 4
    module = Recording(data)
    module.train_dataloader = lambda: loader(data, 4, shuffle=True)
    with pytest.warns(UserWarning, match="overfit_batches: a fit dataloader shuffles"):
        Trainer(accelerator="cpu", max_epochs=3, overfit_batches=overfit, num_sanity_val_steps=0, **QUIET).fit(module)
    first_two = [round(float(data[i][1][0]), 6) for i in (0, 4)]
    assert module.train_seen == first_two * 3
    assert module.val_seen == first_two * 3

    # the same numbers as training on those two batches alone
    reference = Regression()
    Trainer(accelerator="cpu", max_epochs=3, **QUIET).fit(reference, loader(Subset(data, range(8)), 4))
    assert_params_close(params_of(module), params_of(reference), atol=0.0)


# -- model summary ----------------------------------------------------------------------------
class Summarized(Regression):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(1, 1)
        self.head.requires_grad_(False)
        self.example_input_array = torch.zeros(5, 4)

    def forward(self, x):
        return self.head(self.net(x))


def test_summary_table_counts_parameters_and_output_shapes():
    lines = summarize(Summarized()).splitlines()
    assert lines[0].split(" | ") [1:] == ["Name", "Type      ", "Params", "Trainable", "Size (MB)", "Out sizes"]
    rows = [[cell.strip() for cell in line.split("|")] for line in lines[2:4]]
    # net: 4*8+8 + 8*1+1 = 49 parameters; head: 1*1+1 = 2, frozen
    assert rows[0] == ["0", "net", "Sequential", "49", "49", f"{49 * 4 / 1e6:.3f}", "[5, 1]"]
    assert rows[1] == ["1", "head", "Linear", "2", "0", f"{2 * 4 / 1e6:.3f}", "[5, 1]"]
    totals = [line.split(None, 1) for line in lines[5:]]
    assert totals == [
        ["49", "Trainable params"], ["2", "Non-trainable params"], ["51", "Total params"],
        [f"{51 * 4 / 1e6:.3f}", "Total estimated model params size (MB)"],
    ]


def test_summary_max_depth():
    names = lambda depth: [line.split("|")[1].strip() for line in summarize(Summarized(), depth).splitlines()[2:-5]]
    assert names(1) == ["net", "head"]
    assert names(2) == ["net", "net.0", "net.1", "net.2", "head"]
    assert names(-1) == names(2)


def test_summary_is_printed_at_fit_start_unless_turned_off(capsys):
    data = loader(regression_data(16), 4)
    Trainer(accelerator="cpu", max_epochs=1, **{**QUIET, "enable_model_summary": True}).fit(Summarized(), data)
    assert "Total params" in capsys.readouterr().out
    Trainer(accelerator="cpu", max_epochs=1, **QUIET).fit(Summarized(), data)  # QUIET: enable_model_summary=False
    assert "Total params" not in capsys.readouterr().out
    trainer = Trainer(accelerator="cpu", max_epochs=1, callbacks=[ModelSummary(max_depth=2)], **QUIET)
    assert sum(isinstance(cb, ModelSummary) for cb in trainer.callbacks) == 1
    trainer.fit(Summarized(), data)
    assert "net.2" in capsys.readouterr().out


# -- reload_dataloaders_every_n_epochs --------------------------------------------------------
@pytest.mark.parametrize("every, calls", [(0, 1), (1, 5), (2, 3)])
def test_reload_dataloaders_every_n_epochs_calls_the_hooks_again(every, calls):
    module = Recording(regression_data(16))
    Trainer(accelerator="cpu", max_epochs=5, reload_dataloaders_every_n_epochs=every, num_sanity_val_steps=0,
            **QUIET).fit(module)
    assert module.loader_calls == {"train": calls, "val": calls}


def test_reloaded_loaders_are_the_ones_trained_on():
    module = Recording(regression_data(16, seed=0))
    datasets = iter([regression_data(16, seed=s) for s in range(3)])
    module.train_dataloader = lambda: loader(next(datasets), 4)
    Trainer(accelerator="cpu", max_epochs=3, reload_dataloaders_every_n_epochs=1, limit_val_batches=0, **QUIET).fit(module)
    expected = [round(float(regression_data(16, seed=s)[i][1][0]), 6) for s in range(3) for i in (0, 4, 8, 12)]
    assert module.train_seen == expected


# -- profiler ---------------------------------------------------------------------------------
def test_simple_profiler_times_hooks_and_steps_and_writes_the_table(tmp_path, capsys):
    from callbacks import CSVLogger

    module = Recording(regression_data(16))
    trainer = Trainer(accelerator="cpu", max_epochs=2, profiler="simple", num_sanity_val_steps=0,
                      logger=CSVLogger(save_dir=tmp_path), enable_progress_bar=False, enable_checkpointing=False)
    trainer.fit(module)
    path = f"{trainer.log_dir}/fit-profiler.txt"
    with open(path, encoding="utf-8") as f:
        report = f.read()
    assert report.strip() in capsys.readouterr().out
    calls = {
        line.split("|")[0].strip(): int(line.split("|")[2]) for line in report.splitlines()[4:]
    }
    # 2 epochs of 4 batches, 2 validation runs of 4 batches
    assert calls["run_training_epoch"] == 2
    assert calls["run_training_batch"] == 8
    assert calls["[Module]Recording.validation_step"] == 8
    assert calls["[Callback]ModelSummary.on_fit_start"] == 1


class AfterBackward(Recording):
    def on_after_backward(self):
        pass


def test_advanced_profiler_writes_each_sections_cprofile_statistics_counting_each_call_once(tmp_path, capsys):
    trainer = Trainer(accelerator="cpu", max_epochs=1, profiler="advanced", num_sanity_val_steps=0,
                      default_root_dir=tmp_path, logger=False, enable_progress_bar=False, enable_checkpointing=False,
                      enable_model_summary=False)
    trainer.fit(AfterBackward(regression_data(16)))
    report = (tmp_path / "fit-profiler.txt").read_text()
    assert report.strip() in capsys.readouterr().out
    sections = {part.split("\n", 1)[0]: part for part in report.split("Profile stats for: ")[1:]}
    assert {"run_training_epoch", "run_training_batch", "[Module]AfterBackward.on_after_backward",
            "[Module]AfterBackward.validation_step"} <= set(sections)
    # a section inside another pauses the outer one: the module's training_step (4 batches) is counted in
    # run_training_batch only, validation_step (4 batches) in its own section only
    assert "4    " in sections["run_training_batch"].split("(training_step)")[0].rsplit("\n", 1)[1]
    assert "(training_step)" not in sections["run_training_epoch"]
    assert "(validation_step)" in sections["[Module]AfterBackward.validation_step"]
    assert "(validation_step)" not in sections["run_training_batch"]
    # and the outer section goes on after the inner one ends: the optimizer steps after on_after_backward
    assert "sgd.py" in sections["run_training_batch"]


class WithBatchStart(Regression):
    def on_train_batch_start(self, batch, batch_idx):
        pass


def test_pytorch_profiler_writes_a_trace_with_the_sections(tmp_path):
    import json

    trainer = Trainer(accelerator="cpu", max_epochs=1, profiler="pytorch", default_root_dir=tmp_path,
                      logger=False, enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)
    trainer.fit(WithBatchStart(), loader(regression_data(8), 4))
    with open(tmp_path / "fit-trace-rank0.json", encoding="utf-8") as f:
        names = [event.get("name") for event in json.load(f)["traceEvents"]]
    assert names.count("run_training_batch") == 2
    assert names.count("[Module]WithBatchStart.on_train_batch_start") == 2
    assert (tmp_path / "fit-profiler.txt").is_file()


def test_no_profiler_by_default_and_fast_dev_run_writes_no_profile(tmp_path):
    data = loader(regression_data(8), 4)
    trainer = Trainer(accelerator="cpu", max_epochs=1, default_root_dir=tmp_path, **QUIET)
    assert not trainer.profiler.active
    trainer = Trainer(accelerator="cpu", fast_dev_run=True, profiler="simple", default_root_dir=tmp_path,
                      enable_progress_bar=False)
    trainer.fit(Regression(), data)
    assert list(tmp_path.iterdir()) == []


def test_reload_calls_a_datamodules_hooks_again():
    from trainer import DataModule

    class Counting(DataModule):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def train_dataloader(self):
            self.calls += 1
            return loader(regression_data(16), 4)

    dm = Counting()
    Trainer(accelerator="cpu", max_epochs=4, reload_dataloaders_every_n_epochs=2, **QUIET).fit(Regression(), datamodule=dm)
    assert dm.calls == 2  # epochs 0 and 2
