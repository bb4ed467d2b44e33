"""`ProgressBar`: tqdm bars on a terminal, periodic single lines elsewhere (CI logs)."""

from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, TextIO

from callbacks._extras import require_extra
from callbacks._utils import _format_duration, _to_float
from callbacks.callback import Callback
from trainer.contracts.arguments import check_bool, check_int, check_number, hint_misspelled_arguments

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView

# with no known total, a non-terminal stream gets a line this often
_UNKNOWN_TOTAL_LINE_INTERVAL_S = 30.0


class ProgressBar(Callback):
    """One bar per training epoch, plus a bar for each validation/test/predict run (global rank 0).

    On a terminal it draws tqdm bars with it/s and ``trainer.progress_bar_metrics``: on the
    epoch bar the training loss and what ``self.log(..., prog_bar=True)`` recorded in training
    and in the last validation; on an evaluation bar only that run's ``prog_bar=True`` values.
    When the stream is not a terminal (CI, ``> file``), it prints a single line each
    ``line_every_percent`` of an epoch and one at the epoch's end, and one line per evaluation
    run. An epoch resumed mid-way starts its bar at the resumed batch.

    Metric values are read (``.item()``) only when the text is refreshed, at most once per
    ``min_interval_s``: no host-device sync per step.

    Args:
        refresh_rate: Advance the bar every this many batches; ``0`` disables the bar.
        min_interval_s: Shortest time between two refreshes of the text.
        line_every_percent: Non-terminal mode: a line every this much of an epoch.
        file: Stream to write to (default ``sys.stdout``).
        leave: Keep each finished epoch's bar on screen.
    """

    role = "progress_bar"
    _extra: str | None = None  # the package extra a subclass draws with, checked before its arguments

    @hint_misspelled_arguments
    def __init__(
        self,
        refresh_rate: int = 1,
        min_interval_s: float = 0.2,
        line_every_percent: float = 10.0,
        file: TextIO | None = None,
        leave: bool = True,
    ) -> None:
        if self._extra is not None:
            require_extra(self._extra, type(self).__name__)
        check_int("ProgressBar(refresh_rate)", refresh_rate, 0)
        check_number("ProgressBar(min_interval_s)", min_interval_s, minimum=0)
        check_number("ProgressBar(line_every_percent)", line_every_percent, above=0, maximum=100)
        if file is not None and not callable(getattr(file, "write", None)):
            raise TypeError(f"ProgressBar(file={file!r}): expected None or a text stream with write().")
        check_bool("ProgressBar(leave)", leave)
        self.refresh_rate = refresh_rate
        self.min_interval_s = float(min_interval_s)
        self.line_every_percent = float(line_every_percent)
        self.leave = leave
        self._file = file
        self._enabled = False
        self._train_bar: _Bar | None = None
        self._train_done = 0  # batches of the epoch done, counted here while the bar has nothing to do
        self._eval_bar: _Bar | None = None
        # the last validation's values stay on the training bar until the next validation
        self._val_metrics: dict[str, float] = {}
        # `progress_bar_metrics` keeps training's values through a validation inside fit (as
        # Lightning's): the evaluation bar shows only what changed since it started
        self._before_eval: dict[str, float] = {}

    @property
    def file(self) -> TextIO:
        """The stream the bars are written to."""
        return self._file if self._file is not None else sys.stdout

    @property
    def is_enabled(self) -> bool:
        """True on global rank 0 once set up, unless ``refresh_rate == 0``."""
        return self._enabled

    def setup(self, trainer: TrainerView, pl_module: ModuleView, stage: str) -> None:
        self._enabled = trainer.is_global_zero and self.refresh_rate > 0
        self._val_metrics = {}

    # -- training ---------------------------------------------------------------------------
    def on_train_epoch_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if not self._enabled:
            return
        self._close_train_bar()
        self._train_done = 0
        self._train_bar = self._new_bar(
            f"Epoch {trainer.current_epoch}",
            _total(trainer.num_training_batches),
            position=0,
            leave=self.leave,
        )

    def on_train_batch_end(
        self, trainer: TrainerView, pl_module: ModuleView, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        bar = self._train_bar
        if bar is None:
            return
        if batch_idx < bar.due - 1:  # the bar would only count this batch: it does when it next has work
            self._train_done = batch_idx + 1
            return
        if bar.n == 0 and batch_idx > 0:  # an epoch resumed from a mid-epoch checkpoint (`due` is 0 at first)
            bar.start_at(batch_idx)
        bar.catch_up(batch_idx)
        bar.advance(1, self.refresh_rate, lambda: self._train_postfix(trainer))

    def on_train_epoch_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        # runs after the epoch's validation: the final line shows the validation metrics too
        self._close_train_bar(trainer)

    def on_train_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        # max_steps inside an epoch leaves it unfinished (no epoch end): show where it stopped
        self._close_train_bar(trainer)

    # -- evaluation -------------------------------------------------------------------------
    def on_validation_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        counts = trainer.num_val_batches
        if trainer.sanity_checking:
            cap = trainer.num_sanity_val_steps
            counts = [n if cap == -1 else cap if n is None else min(n, cap) for n in counts]
        if self._enabled and self._train_bar is not None:  # one read per validation run, not per step
            self._before_eval = self._metrics_postfix(trainer)
        self._start_eval("Sanity Checking" if trainer.sanity_checking else "Validation", counts)

    def on_validation_batch_end(
        self, trainer: TrainerView, pl_module: ModuleView, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Each evaluation batch end, whatever the stage."""
        self._advance_eval(trainer)

    def on_validation_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        # the sanity check only proves the loop runs: no line for it in logs
        metrics = self._end_eval(trainer, print_line=not trainer.sanity_checking)
        if metrics is not None and not trainer.sanity_checking:
            self._val_metrics = metrics

    def on_test_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        self._start_eval("Testing", getattr(trainer, "num_test_batches", None))

    def on_test_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        self._end_eval(trainer)

    def on_predict_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        self._start_eval("Predicting", getattr(trainer, "num_predict_batches", None))

    # the same for every evaluation stage
    on_test_batch_end = on_predict_batch_end = on_validation_batch_end
    on_predict_end = on_test_end

    # -- failures ---------------------------------------------------------------------------
    def on_exception(self, trainer: TrainerView, pl_module: ModuleView, exception: BaseException) -> None:
        self._close_all()

    def teardown(self, trainer: TrainerView, pl_module: ModuleView, stage: str) -> None:
        self._close_all()

    def print(self, *args: Any, sep: str = " ", end: str = "\n") -> None:
        """Print a line without breaking the bars: above them while a tqdm bar is drawn."""
        text = sep.join(str(a) for a in args)
        if any(bar is not None and bar.drawn for bar in (self._train_bar, self._eval_bar)):
            self._write_above_bars(text, end)
        else:
            self.file.write(text + end)
            self.file.flush()

    def _write_above_bars(self, text: str, end: str) -> None:
        from tqdm import tqdm

        tqdm.write(text, file=self.file, end=end)

    # -- internals --------------------------------------------------------------------------
    def _new_bar(self, desc: str, total: int | None, position: int, leave: bool) -> _Bar:
        return _Bar(
            desc,
            total,
            self.file,
            _isatty(self.file),
            position,
            leave,
            self.min_interval_s,
            self.line_every_percent,
        )

    def _start_eval(self, desc: str, num_batches: Any) -> None:
        if not self._enabled:
            return
        self._close_eval_bar()
        position = 1 if self._train_bar is not None else 0
        self._eval_bar = self._new_bar(
            desc, _total(num_batches), position=position, leave=position == 0 and self.leave
        )
        # evaluation lines are printed once at the end, not every few percent
        self._eval_bar.periodic_lines = False

    def _advance_eval(self, trainer: TrainerView) -> None:
        if self._eval_bar is not None:
            self._eval_bar.advance(1, self.refresh_rate, lambda: self._eval_postfix(trainer))

    def _end_eval(self, trainer: TrainerView, print_line: bool = True) -> dict[str, float] | None:
        """Close the evaluation bar; return the metrics it showed, if it read them."""
        bar, self._eval_bar = self._eval_bar, None
        if bar is None:
            return None
        shown = bar.close(lambda: self._eval_postfix(trainer), print_line=print_line)
        self._before_eval = {}
        return shown

    def _eval_postfix(self, trainer: TrainerView) -> dict[str, float]:
        return {k: v for k, v in self._metrics_postfix(trainer).items() if self._before_eval.get(k) != v}

    def _close_train_bar(self, trainer: TrainerView | None = None) -> None:
        bar, self._train_bar = self._train_bar, None
        if bar is not None:
            bar.catch_up(self._train_done)
            bar.close(None if trainer is None else lambda: self._train_postfix(trainer))

    def _close_eval_bar(self) -> None:
        bar, self._eval_bar = self._eval_bar, None
        if bar is not None:
            bar.close(None)

    def _close_all(self) -> None:
        self._close_eval_bar()
        bar, self._train_bar = self._train_bar, None
        if bar is not None:
            bar.catch_up(self._train_done)
            bar.close(None)

    def _train_postfix(self, trainer: TrainerView) -> dict[str, float]:
        # in `progress_bar_metrics`' order, as Lightning's bar (which keeps the validation's values)
        shown = self._metrics_postfix(trainer)
        return {**shown, **{k: v for k, v in self._val_metrics.items() if k not in shown}}

    @staticmethod
    def _metrics_postfix(trainer: TrainerView) -> dict[str, float]:
        # reading `progress_bar_metrics` syncs with the device: only when the text is redrawn
        out: dict[str, float] = {}
        for key, value in trainer.progress_bar_metrics.items():
            try:
                out[key] = _to_float(value)
            except (TypeError, ValueError, RuntimeError):  # not a scalar: not for a progress bar
                continue
        return out


class _Bar:
    """One progress bar: a tqdm bar on a terminal, periodic lines otherwise."""

    def __init__(
        self,
        desc: str,
        total: int | None,
        file: TextIO,
        tty: bool,
        position: int,
        leave: bool,
        min_interval_s: float,
        line_every_percent: float,
    ) -> None:
        self.desc = desc
        self.total = total
        self.file = file
        self.n = 0
        self.periodic_lines = True
        self._initial = 0  # batches done before this bar started (a resumed epoch)
        self._pending = 0
        self._min_interval_s = min_interval_s
        self._start = time.perf_counter()
        self._last_refresh = -math.inf
        self._line_step = line_every_percent / 100.0
        self._next_line_fraction = self._line_step
        self._line_n = self._first_n_at(self._next_line_fraction)
        self._last_line_time = self._start
        self._tty = tty
        self._position = position
        self._leave = leave
        # the terminal display (tqdm, or what `_make_display` of a subclass gives), created at the
        # first batch, when the starting position is known
        self._display: Any = None
        # the count at which `advance` next has work (a redraw, a line, a clock read or opening the
        # display): up to it an owner may count batches itself and hand them over with `catch_up`
        self.due: float = 0

    @property
    def drawn(self) -> bool:
        """Whether the bar is on the terminal now."""
        return self._display is not None

    def start_at(self, n: int) -> None:
        """Start counting at ``n`` batches done (not counted in the rate); call before ``advance``."""
        self.n = self._initial = n
        if self.total:
            while n / self.total >= self._next_line_fraction - 1e-9:
                self._next_line_fraction += self._line_step
            self._line_n = self._first_n_at(self._next_line_fraction)

    def _first_n_at(self, fraction: float) -> int:
        """The fewest batches done for which `_line_due` prints the line at ``fraction`` (with a
        known total), so that `advance` checks that with one comparison."""
        if not self.total:
            return 0
        n = max(0, math.floor((fraction - 1e-9) * self.total) - 1)
        while n / self.total < fraction - 1e-9:
            n += 1
        return n

    def _open_display(self) -> None:
        if self._tty and self._display is None:
            self._display = self._make_display()

    def _make_display(self) -> Any:
        """A terminal bar with tqdm's ``update``, ``set_postfix_str`` and ``close``."""
        from tqdm import tqdm  # only a terminal run pays for importing tqdm

        return tqdm(
            desc=self.desc,
            total=self.total,
            initial=self._initial,
            file=self.file,
            position=self._position,
            leave=self._leave,
            mininterval=self._min_interval_s,
            dynamic_ncols=True,
            unit="it",
        )

    def catch_up(self, n: int) -> None:
        """Count up to ``n`` batches done without drawing (batches an owner counted itself before `due`)."""
        if n > self.n:
            self._pending += n - self.n
            self.n = n

    def advance(self, n: int, every: int, postfix: Callable[[], dict[str, float]]) -> None:
        """Count ``n`` batches; redraw every ``every`` batches, at most once per ``min_interval_s``."""
        if self._tty and self._display is None:
            self._open_display()
        self.n += n
        self._pending += n
        if self._pending < every:
            self.due = self._next_due(every)
            return
        if self._display is not None:
            now = time.perf_counter()
            if now - self._last_refresh >= self._min_interval_s:
                self._last_refresh = now
                self._display.set_postfix_str(_format_postfix(postfix()), refresh=False)
            self._display.update(self._pending)
        elif self.periodic_lines and (not self.total or self._line_n <= self.n < self.total):
            now = time.perf_counter()  # a batch without a line due reads no clock
            if self._line_due(now):
                self._print_line(postfix(), now)
        self._pending = 0
        self.due = self._next_due(every)

    def _next_due(self, every: int) -> float:
        """The count at which `advance` next does more than count: the next redraw check (every
        ``every`` batches), and off a terminal with a known total the first such check at or
        after the next line's count."""
        check = self.n + every - self._pending
        if self._display is not None or self._tty or not self.total:  # a redraw, or a clock read for a line
            return check
        if not self.periodic_lines or self._line_n >= self.total:
            return math.inf
        if check >= self._line_n:
            return check
        return check + -(-(self._line_n - check) // every) * every

    def close(
        self, postfix: Callable[[], dict[str, float]] | None, print_line: bool = True
    ) -> dict[str, float] | None:
        """Finish the bar, showing ``postfix()`` in its final state (a line, off a terminal, if
        ``print_line``); returns what ``postfix()`` gave, or None if it was not needed."""
        values = None
        if self._display is not None:
            if self._pending:
                self._display.update(self._pending)
            if postfix is not None:
                values = postfix()
                self._display.set_postfix_str(_format_postfix(values), refresh=False)
            self._display.close()
            self._display = None
        elif not self._tty and print_line and postfix is not None:
            values = postfix()
            self._print_line(values, time.perf_counter())
        self._pending = 0
        return values

    def _line_due(self, now: float) -> bool:
        if self.total:
            # the 100 % line is the one printed at the end, with the final metrics
            if self.n >= self.total or self.n / self.total < self._next_line_fraction - 1e-9:
                return False
            while self.n / self.total >= self._next_line_fraction - 1e-9:
                self._next_line_fraction += self._line_step
            self._line_n = self._first_n_at(self._next_line_fraction)
            return True
        return now - self._last_line_time >= _UNKNOWN_TOTAL_LINE_INTERVAL_S

    def _print_line(self, postfix: dict[str, float], now: float) -> None:
        self._last_line_time = now
        elapsed = now - self._start
        rate = (self.n - self._initial) / elapsed if elapsed > 0 else 0.0
        if self.total:
            remaining = (self.total - self.n) / rate if rate > 0 else 0.0
            progress = (
                f"{100.0 * self.n / self.total:3.0f}% {self.n}/{self.total} "
                f"[{_format_duration(elapsed)}<{_format_duration(remaining)}, {rate:.2f}it/s]"
            )
        else:
            progress = f"{self.n} [{_format_duration(elapsed)}, {rate:.2f}it/s]"
        text = _format_postfix(postfix)
        print(f"{self.desc}: {progress}" + (f" {text}" if text else ""), file=self.file, flush=True)


def _format_postfix(postfix: dict[str, float]) -> str:
    return ", ".join(f"{key}={value:.4g}" for key, value in postfix.items())


def _total(num_batches: Any) -> int | None:
    """A bar's length from ``num_*_batches`` (an int, None/inf for unknown, or one per dataloader)."""
    counts = list(num_batches) if isinstance(num_batches, (list, tuple)) else [num_batches]
    if any(n is None or n == math.inf for n in counts):
        return None
    return int(sum(counts))


def _isatty(file: TextIO) -> bool:
    try:
        return bool(file.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
