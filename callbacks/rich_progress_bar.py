"""`RichProgressBar`: the `ProgressBar` drawn with rich on a terminal (extra ``rich``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from callbacks.progress_bar import ProgressBar, _Bar, _isatty

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView


class RichProgressBar(ProgressBar):
    """`ProgressBar` with rich bars on a terminal: the same bars, metrics and rank-zero rule.

    Off a terminal it prints the same single lines as `ProgressBar`. Takes `ProgressBar`'s
    arguments. The training and evaluation bars share one rich live display, stopped at the end
    of each Trainer call.
    """

    _extra = "rich"
    _progress: Any = None  # the live display, started on first use (`_live`)

    def _new_bar(self, desc: str, total: int | None, position: int, leave: bool) -> _Bar:
        return _RichBar(
            self, desc, total, self.file, _isatty(self.file), position, leave, self.min_interval_s,
            self.line_every_percent,
        )

    def _live(self) -> Any:
        """The rich ``Progress`` display (started on first use)."""
        if self._progress is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn,
            )

            console = Console(file=self.file, force_terminal=True)
            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("<"), TimeRemainingColumn(), TextColumn("{task.fields[metrics]}"), console=console,
            )
            self._progress.start()
        return self._progress

    def _write_above_bars(self, text: str, end: str) -> None:
        if self._progress is None:
            super()._write_above_bars(text, end)
        else:  # the live display redraws itself below the line
            self._progress.console.print(text, end=end, markup=False, highlight=False)

    def _stop_live(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def on_exception(self, trainer: TrainerView, pl_module: ModuleView, exception: BaseException) -> None:
        super().on_exception(trainer, pl_module, exception)
        self._stop_live()

    def teardown(self, trainer: TrainerView, pl_module: ModuleView, stage: str) -> None:
        super().teardown(trainer, pl_module, stage)
        self._stop_live()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_progress": None}  # a live display does not cross processes


class _RichBar(_Bar):
    def __init__(self, owner: RichProgressBar, *args: Any) -> None:
        super().__init__(*args)
        self._owner = owner

    def _make_display(self) -> Any:
        return _RichTask(self._owner._live(), self.desc, self.total, self.n, self._leave)


class _RichTask:
    """One task of the shared rich ``Progress``, with the calls `_Bar` makes on a tqdm bar."""

    def __init__(self, progress: Any, desc: str, total: int | None, initial: int, leave: bool) -> None:
        self._progress = progress
        self._leave = leave
        self._task = progress.add_task(desc, total=total, completed=initial, metrics="")

    def set_postfix_str(self, text: str, refresh: bool = False) -> None:
        self._progress.update(self._task, metrics=text)

    def update(self, n: int) -> None:
        self._progress.advance(self._task, n)

    def close(self) -> None:
        if self._leave:
            self._progress.refresh()
        else:
            self._progress.remove_task(self._task)
