"""ProgressBar: periodic lines off a terminal, tqdm on one, and no per-step metric reads."""

from __future__ import annotations

import io
import re
import sys

import pytest
import torch

from callbacks import Callback, ProgressBar
from tests.helpers.callbacks import Scripted, loader
from tests.helpers.models import QUIET
from trainer import Trainer


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _CountingTrainer(Trainer):
    """Counts reads of ``progress_bar_metrics`` (each one syncs with the device)."""

    reads = 0

    @property
    def progress_bar_metrics(self):
        self.reads += 1
        return super().progress_bar_metrics


def _fit(bar, epochs=1, n=80, val=True, trainer_cls=Trainer, module=None):
    trainer = trainer_cls(
        max_epochs=epochs, callbacks=[bar], logger=False, enable_checkpointing=False, num_sanity_val_steps=2
    )
    module = Scripted(prog_bar=True) if module is None else module
    trainer.fit(module, loader(n, 4), loader(8, 4) if val else None)
    return trainer


def test_non_tty_prints_periodic_single_lines():
    out = io.StringIO()
    _fit(ProgressBar(file=out, line_every_percent=25), epochs=2)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    epoch0 = [line for line in lines if line.startswith("Epoch 0:")]
    assert [re.search(r"(\d+)% (\d+)/20", line).group(1, 2) for line in epoch0] == [
        ("25", "5"),
        ("50", "10"),
        ("75", "15"),
        ("100", "20"),
    ]
    for line in epoch0:
        assert re.search(r"[\d.]+it/s\]", line) and "train_loss=" in line and "loss=" in line
    assert "val_loss=" in epoch0[-1]  # the epoch-end line comes after the epoch's validation
    assert len([line for line in lines if line.startswith("Validation:")]) == 2  # one per epoch
    assert not any(line.startswith("Sanity") for line in lines)
    assert len(lines) == 2 * 4 + 2


def test_metrics_are_read_only_on_refresh():
    # one read per printed line, none per step
    bar = ProgressBar(file=io.StringIO(), line_every_percent=50, min_interval_s=3600)
    trainer = _fit(bar, n=80, trainer_cls=_CountingTrainer)
    # 50 % line, validation start (what the evaluation bar leaves out), validation line, epoch-end line; 20 batches
    assert trainer.reads == 4

    bar = ProgressBar(file=_Terminal(), min_interval_s=3600)
    trainer = _fit(bar, n=80, trainer_cls=_CountingTrainer)
    # tty: the first refresh, the validation bar's first refresh and close, the sanity bar's
    # first refresh and close, the validation start, and the epoch bar's close
    assert trainer.reads <= 7


def test_tty_draws_tqdm_bars():
    out = _Terminal()
    _fit(ProgressBar(file=out), epochs=2)
    text = out.getvalue()
    assert "\r" in text
    assert "Epoch 0: 100%" in text and "Epoch 1: 100%" in text
    assert "Validation" in text and "Sanity Checking" in text
    assert "it/s" in text and "train_loss=" in text


def test_refresh_rate_zero_disables_the_bar():
    out = io.StringIO()
    _fit(ProgressBar(refresh_rate=0, file=out))
    assert out.getvalue() == ""


def test_default_bar_goes_to_stdout(capsys):
    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False)
    assert any(isinstance(cb, ProgressBar) for cb in trainer.callbacks)
    trainer.fit(Scripted(), loader(16, 4))
    assert "Epoch 0: 100% 4/4" in capsys.readouterr().out


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"refresh_rate": -1}, r"ProgressBar\(refresh_rate\) must be an int >= 0, got -1"),
        ({"min_interval_s": -0.5}, r"ProgressBar\(min_interval_s\) must be a finite number >= 0, got -0.5"),
        ({"line_every_percent": 0}, r"ProgressBar\(line_every_percent\) must be a finite number in \(0, 100\], got 0"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ProgressBar(**kwargs)


class _SaveAtBatch(Callback):
    def __init__(self, batch_idx, path):
        self.batch_idx, self.path = batch_idx, path

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if batch_idx == self.batch_idx:
            trainer.save_checkpoint(self.path)


def _bar_lines(out, prefix):
    lines = [line for line in out.getvalue().splitlines() if line.startswith(prefix)]
    return [re.search(r"(\d+)% (\d+)/(\d+)", line).group(1, 2, 3) for line in lines]


def test_resumed_epoch_starts_at_the_resumed_batch_and_ends_at_100_percent(tmp_path):
    path = str(tmp_path / "mid.ckpt")
    Trainer(accelerator="cpu", max_epochs=1, callbacks=[_SaveAtBatch(13, path)], **QUIET).fit(Scripted(), loader(88, 4))
    out = io.StringIO()
    trainer = Trainer(accelerator="cpu",
        max_epochs=1,
        callbacks=[ProgressBar(file=out, line_every_percent=25)],
        logger=False,
        enable_checkpointing=False,
    )
    trainer.fit(Scripted(), loader(88, 4), ckpt_path=path)  # 22 batches, resumed after 14
    # the next line due after 14/22 (64 %) is the 75 % one; the bar ends full, not at 8/22
    assert _bar_lines(out, "Epoch 0:") == [("77", "17", "22"), ("100", "22", "22")]


class _Evaluated(Scripted):
    def test_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.net(x), y), prog_bar=True)

    def predict_step(self, batch, batch_idx):
        return self.net(batch[0])


def test_standalone_evaluation_bars_have_totals_and_only_their_metrics():
    out = io.StringIO()
    trainer = Trainer(accelerator="cpu", callbacks=[ProgressBar(file=out)], logger=False, enable_checkpointing=False)
    module = _Evaluated(prog_bar=True)
    trainer.validate(module, loader(40, 4))
    assert trainer.num_val_batches == [10]
    validated = float(trainer.callback_metrics["val_loss"])  # test() then holds its own metrics only (Lightning)
    trainer.test(module, [loader(12, 4), loader(8, 4)])
    trainer.predict(module, loader(20, 4))
    lines = out.getvalue().splitlines()
    assert [re.search(r"^(\w+): (\d+)% (\d+)/(\d+)", line).groups() for line in lines] == [
        ("Validation", "100", "10", "10"),
        ("Testing", "100", "5", "5"),
        ("Predicting", "100", "5", "5"),
    ]
    val_metrics = dict(re.findall(r"(\w+)=([-\d.e]+)", lines[0]))
    assert set(val_metrics) == {"val_loss"}
    shown = float(val_metrics["val_loss"])  # printed with 4 significant digits
    assert shown == pytest.approx(validated, rel=1e-3)
    assert _shown(lines[1]) == ["test_loss/dataloader_idx_0", "test_loss/dataloader_idx_1"]
    assert _shown(lines[2]) == []


def _shown(line):
    """The metric names a bar line shows, in order."""
    return re.findall(r"([\w/]+)=", line.split("]", 1)[1])


def test_training_bar_shows_no_duplicate_loss_and_evaluation_bars_no_training_metrics():
    out = io.StringIO()
    _fit(ProgressBar(file=out, line_every_percent=50), epochs=1)  # logs train_loss with prog_bar
    lines = out.getvalue().splitlines()
    epoch = [line for line in lines if line.startswith("Epoch 0:")]
    assert [_shown(line) for line in epoch] == [["train_loss"], ["train_loss", "val_loss"]]  # Lightning's order
    validation = [line for line in lines if line.startswith("Validation:")]
    assert [_shown(line) for line in validation] == [["val_loss"]]

    # a module that shows nothing itself gets no loss either: Lightning 2's bar shows `prog_bar=True` values only
    out = io.StringIO()
    _fit(ProgressBar(file=out, line_every_percent=50), epochs=1, module=Scripted(prog_bar=False))
    lines = out.getvalue().splitlines()
    assert [_shown(line) for line in lines if line.startswith("Epoch 0:")] == [[], []]
    assert [_shown(line) for line in lines if line.startswith("Validation:")] == [[]]


def test_epoch_stopped_by_max_steps_shows_where_it_stopped():
    out = io.StringIO()
    trainer = Trainer(accelerator="cpu",
        max_steps=5,
        callbacks=[ProgressBar(file=out, line_every_percent=25)],
        logger=False,
        enable_checkpointing=False,
    )
    trainer.fit(Scripted(prog_bar=True), loader(32, 4))  # 8 batches: the epoch stops at 5
    assert _bar_lines(out, "Epoch 0:") == [("25", "2", "8"), ("50", "4", "8"), ("62", "5", "8")]
    assert _shown(out.getvalue().splitlines()[-1]) == ["train_loss"]


# -- RichProgressBar (extra `rich`) -----------------------------------------------------------------
def _needs_rich():
    pytest.importorskip("rich", reason="RichProgressBar needs the 'rich' extra")


def test_rich_bar_on_a_terminal_shows_the_same_metrics_as_the_tqdm_bar():
    _needs_rich()
    from callbacks import RichProgressBar

    rich_out, tqdm_out = _Terminal(), _Terminal()
    trainer = _fit(RichProgressBar(file=rich_out), epochs=2)
    assert [type(cb).__name__ for cb in trainer.callbacks].count("ProgressBar") == 0  # no second bar
    _fit(ProgressBar(file=tqdm_out), epochs=2)
    rich_text, tqdm_text = rich_out.getvalue(), tqdm_out.getvalue()
    assert "\x1b[" in rich_text  # drawn by rich, with terminal control codes
    assert "Epoch 0" in rich_text and "Epoch 1" in rich_text and "20/20" in rich_text
    final = re.findall(r"train_loss=[0-9.e+-]+, val_loss=[0-9.e+-]+", tqdm_text)[-1]
    assert final in rich_text  # the same metrics, formatted the same way


def test_rich_bar_off_a_terminal_prints_the_same_lines():
    _needs_rich()
    from callbacks import RichProgressBar

    rich_out, plain_out = io.StringIO(), io.StringIO()
    _fit(RichProgressBar(file=rich_out))
    _fit(ProgressBar(file=plain_out))
    strip = lambda text: [re.sub(r"\[.*?\]", "", line) for line in text.splitlines()]  # noqa: E731 - timings differ
    assert strip(rich_out.getvalue()) == strip(plain_out.getvalue()) and rich_out.getvalue()


def test_rich_bar_without_rich_says_which_extra_to_install_before_checking_its_arguments(monkeypatch):
    from callbacks import RichProgressBar

    monkeypatch.setitem(sys.modules, "rich", None)  # as if the extra were not installed
    with pytest.raises(ImportError, match=r"RichProgressBar needs rich: pip install 'lockstep-trainer\[rich\]'"):
        RichProgressBar(refresh_rate=-1)
    with pytest.raises(ValueError, match="refresh_rate"):
        ProgressBar(refresh_rate=-1)  # the plain bar needs no extra


def _rich_two_ranks(rank, world_size):
    from callbacks import RichProgressBar

    out = _Terminal()
    _fit(RichProgressBar(file=out))
    return out.getvalue()


@pytest.mark.distributed
def test_rich_bar_draws_on_global_rank_zero_only():
    _needs_rich()
    from tests.helpers.distributed import run_ranks

    texts = run_ranks(_rich_two_ranks, world_size=2, init_group=False)
    assert "Epoch 0" in texts[0] and texts[1] == ""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("every", [1, 2, 3, 7])
@pytest.mark.parametrize("total, start", [(1, 0), (9, 0), (20, 0), (37, 0), (37, 5), (20, 19)])
def test_a_bar_its_owner_counts_until_due_prints_the_lines_of_one_advanced_every_batch(every, total, start):
    """The training bar is called only when it has work (`_Bar.due`); the batches in between are
    handed over with `catch_up`. The lines (their counts and percentages) must be the same."""
    from callbacks.progress_bar import _Bar

    def lines(lazy: bool) -> tuple[list[str], int]:
        out = io.StringIO()
        bar = _Bar("Epoch 0", total, out, False, 0, True, 0.0, 10.0)
        advances, done = 0, start
        for batch_idx in range(start, total):
            if lazy and batch_idx < bar.due - 1:
                done = batch_idx + 1
                continue
            if batch_idx == start and start:
                bar.start_at(start)
            bar.catch_up(batch_idx)
            bar.advance(1, every, lambda: {"loss": 1.0})
            advances += 1
            done = batch_idx + 1
        bar.catch_up(done)
        bar.close(lambda: {"loss": 1.0})
        return [re.sub(r"\[.*\]", "", line) for line in out.getvalue().splitlines()], advances

    eager, eager_calls = lines(False)
    lazy, lazy_calls = lines(True)
    assert lazy == eager
    assert eager[-1].startswith("Epoch 0: 100%")
    if total == 37:  # a line every 3.7 batches: the owner counts most batches itself
        assert lazy_calls < eager_calls / 2
