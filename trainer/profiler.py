"""``Trainer(profiler=...)``: where the time of a run goes, per hook and per step.

``"simple"`` times every hook, training batch and epoch, and evaluation step with
`time.perf_counter` and writes a table of them when the run ends; ``"advanced"`` runs `cProfile`
inside the same sections and writes each one's function-level statistics; ``"pytorch"`` records the
same sections as `torch.profiler.record_function` ranges in a `torch.profiler` trace (Chrome
trace format, viewable in chrome://tracing or Perfetto). All write into the Trainer's
``log_dir``; nothing is timed without a profiler.
"""
from __future__ import annotations

import contextlib
import cProfile
import functools
import io
import os
import pstats
import time
from collections import defaultdict
from typing import Any, Callable, ContextManager, Iterator

import torch


class Profiler:
    """The interface: ``profile(name)`` times a section; ``start``/``stop`` bracket one run."""

    active = True

    def profile(self, name: str) -> ContextManager[None]:
        """A context timing the section ``name``."""
        return contextlib.nullcontext()

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` timed as the section ``name`` at every call."""

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.profile(name):
                return fn(*args, **kwargs)

        return timed

    def start(self, stage: str) -> None:
        """A run of ``stage`` (fit, validate, test, predict) begins."""

    def stop(self, stage: str, log_dir: str, rank: int, write: bool = True) -> None:
        """The run ends: report (files in ``log_dir`` when ``write``; the table from rank 0)."""


class _NoProfiler(Profiler):
    active = False


class SimpleProfiler(Profiler):
    """Wall time per section: calls, mean, total and share of the run, as a table."""

    def __init__(self) -> None:
        self.durations: dict[str, list[float]] = defaultdict(list)
        self._started = 0.0

    @contextlib.contextmanager
    def profile(self, name: str) -> Iterator[None]:
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.durations[name].append(time.perf_counter() - begin)

    def start(self, stage: str) -> None:
        self.durations.clear()
        self._started = time.perf_counter()

    def summary(self) -> str:
        """The table: one row per section, the most total time first."""
        total = max(time.perf_counter() - self._started, 1e-12)
        rows = [("Action", "Mean duration (s)", "Num calls", "Total time (s)", "Percentage %")]
        rows.append(("Total", "-", "-", f"{total:.5f}", "100 %"))
        for name, times in sorted(self.durations.items(), key=lambda item: -sum(item[1])):
            spent = sum(times)
            rows.append((name, f"{spent / len(times):.5f}", str(len(times)), f"{spent:.5f}", f"{100 * spent / total:.3f}"))
        widths = [max(len(r[c]) for r in rows) for c in range(5)]
        lines = [" | ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "-" * len(lines[0]))
        return "Profiler report\n" + "\n".join(lines)

    def stop(self, stage: str, log_dir: str, rank: int, write: bool = True) -> None:
        if rank != 0:
            return
        report = self.summary()
        print(report, flush=True)
        if write:
            os.makedirs(log_dir, exist_ok=True)
            with open(os.path.join(log_dir, f"{stage}-profiler.txt"), "w", encoding="utf-8") as f:
                f.write(report + "\n")


class AdvancedProfiler(Profiler):
    """`cProfile` per section: each section's functions by cumulative time, at the end of the run.

    The interpreter has one profiling hook, so a section entered inside another pauses the outer
    one's profile until it ends: each function call is counted once, in the innermost section.
    """

    def __init__(self, line_count_restriction: float = 1.0) -> None:
        self.line_count_restriction = line_count_restriction
        self.profiled: dict[str, cProfile.Profile] = {}
        self._open: list[cProfile.Profile] = []

    @contextlib.contextmanager
    def profile(self, name: str) -> Iterator[None]:
        section = self.profiled.get(name)
        if section is None:
            section = self.profiled[name] = cProfile.Profile()
        if self._open:
            self._open[-1].disable()
        self._open.append(section)
        section.enable()
        try:
            yield
        finally:
            section.disable()
            self._open.pop()
            if self._open:
                self._open[-1].enable()

    def start(self, stage: str) -> None:
        self.profiled.clear()
        self._open.clear()

    def summary(self) -> str:
        """Each section's statistics, sorted by cumulative time, ``line_count_restriction`` of the rows."""
        parts = []
        for name, section in self.profiled.items():
            text = io.StringIO()
            stats = pstats.Stats(section, stream=text)
            stats.strip_dirs().sort_stats("cumulative").print_stats(self.line_count_restriction)
            parts.append(f"Profile stats for: {name}\n{text.getvalue()}")
        return "Profiler report\n\n" + "\n".join(parts)

    def stop(self, stage: str, log_dir: str, rank: int, write: bool = True) -> None:
        if rank != 0:
            return
        report = self.summary()
        print(report, flush=True)
        if write:
            os.makedirs(log_dir, exist_ok=True)
            with open(os.path.join(log_dir, f"{stage}-profiler.txt"), "w", encoding="utf-8") as f:
                f.write(report + "\n")


class PyTorchProfiler(Profiler):
    """A `torch.profiler` trace of the run (CPU, and CUDA when used), one file per rank."""

    def __init__(self) -> None:
        self._profiler: torch.profiler.profile | None = None

    def profile(self, name: str) -> ContextManager[Any]:
        return torch.profiler.record_function(name)

    def start(self, stage: str) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._profiler = torch.profiler.profile(activities=activities)
        self._profiler.__enter__()

    def stop(self, stage: str, log_dir: str, rank: int, write: bool = True) -> None:
        profiler, self._profiler = self._profiler, None
        if profiler is None:
            return
        profiler.__exit__(None, None, None)
        if write:
            os.makedirs(log_dir, exist_ok=True)
            profiler.export_chrome_trace(os.path.join(log_dir, f"{stage}-trace-rank{rank}.json"))
        if rank == 0:
            table = profiler.key_averages().table(sort_by="cpu_time_total", row_limit=30)
            print(table, flush=True)
            if write:
                with open(os.path.join(log_dir, f"{stage}-profiler.txt"), "w", encoding="utf-8") as f:
                    f.write(table + "\n")


def make_profiler(profiler: str | Profiler | None) -> Profiler:
    """The Trainer's ``profiler`` argument as a `Profiler` (checked: None, "simple", "advanced", "pytorch" or one)."""
    if isinstance(profiler, Profiler):
        return profiler
    if profiler is None:
        return _NoProfiler()
    if not isinstance(profiler, str):
        raise TypeError(f"profiler must be None, 'simple', 'advanced', 'pytorch' or a Profiler, got {profiler!r}")
    kinds: dict[str, type[Profiler]] = {"simple": SimpleProfiler, "advanced": AdvancedProfiler, "pytorch": PyTorchProfiler}
    made = kinds.get(profiler)
    if made is None:
        raise ValueError(f"profiler must be None, 'simple', 'advanced', 'pytorch' or a Profiler, got {profiler!r}")
    return made()
