"""``lightning.pytorch.profilers`` under ``python -m trainer.as_lightning``: Lightning's profiler classes
with Lightning's constructors, over Lockstep's own profilers (`trainer.profiler`, which
``Trainer(profiler=...)`` takes). The summary is printed when the run ends and, given a ``filename``,
written to ``{dirpath}/{stage}-{filename}.txt`` (``dirpath`` defaults to the Trainer's ``log_dir``), as
Lightning names it. ``XLAProfiler`` imports but cannot be made.
"""
from __future__ import annotations

import os
import re
from typing import Any, Optional, Union

from trainer import profiler as _core
from trainer.lightning.unsupported import not_provided, refused_class

__all__ = ["Profiler", "PassThroughProfiler", "SimpleProfiler", "AdvancedProfiler", "PyTorchProfiler"]

_DIR = Union[str, "os.PathLike[str]", None]


class Profiler(_core.Profiler):
    """Lightning's profiler base: where its summary goes (``dirpath``, ``filename``)."""

    def __init__(self, dirpath: _DIR = None, filename: Optional[str] = None) -> None:
        self.dirpath = None if dirpath is None else os.fspath(dirpath)
        self.filename = filename


class PassThroughProfiler(Profiler):
    """Lightning's profiler that times nothing."""

    active = False


def _write_summary(profiler: Profiler, report: str, stage: str, log_dir: str, write: bool) -> None:
    """Print the summary and write it to ``{dirpath}/{stage}-{filename}.txt`` when a filename is given."""
    print(report, flush=True)
    if write and profiler.filename:
        directory = profiler.dirpath or log_dir
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, f"{stage}-{profiler.filename}.txt"), "w", encoding="utf-8") as f:
            f.write(report + "\n")


class SimpleProfiler(_core.SimpleProfiler, Profiler):
    """Lightning's ``SimpleProfiler``: wall time per section, as a table at the end of the run."""

    def __init__(self, dirpath: _DIR = None, filename: Optional[str] = None, extended: bool = True) -> None:
        _core.SimpleProfiler.__init__(self)
        Profiler.__init__(self, dirpath, filename)
        self.extended = extended  # Lockstep's table always has Lightning's extended columns

    def stop(self, stage: str, log_dir: str, rank: int, write: bool = True) -> None:
        """Print the table (rank 0) and write it to ``{dirpath}/{stage}-{filename}.txt`` when a filename is given."""
        if rank == 0:
            _write_summary(self, self.summary(), stage, log_dir, write)


class AdvancedProfiler(_core.AdvancedProfiler, Profiler):
    """Lightning's ``AdvancedProfiler``: `cProfile` statistics per section (`trainer.profiler.AdvancedProfiler`);
    ``dump_stats=True`` also writes each section's raw statistics to ``{dirpath}/{stage}-{filename}-{section}.prof``."""

    def __init__(self, dirpath: _DIR = None, filename: Optional[str] = None, line_count_restriction: float = 1.0,
                 dump_stats: bool = False) -> None:
        _core.AdvancedProfiler.__init__(self, line_count_restriction)
        Profiler.__init__(self, dirpath, filename)
        self.dump_stats = dump_stats

    def stop(self, stage: str, log_dir: str, rank: int, write: bool = True) -> None:
        """Print the statistics (rank 0), write them as `SimpleProfiler` does, and dump the raw ones when asked."""
        if rank != 0:
            return
        _write_summary(self, self.summary(), stage, log_dir, write)
        if write and self.dump_stats:
            directory = self.dirpath or log_dir
            os.makedirs(directory, exist_ok=True)
            for section, stats in self.profiled.items():
                name = re.sub(r"[\\/:*?\"<>|\n\r\t]", "_", "-".join(filter(None, [stage, self.filename, section])))
                stats.dump_stats(os.path.join(directory, name + ".prof"))


class PyTorchProfiler(_core.PyTorchProfiler, Profiler):
    """Lightning's ``PyTorchProfiler``: a ``torch.profiler`` trace of the run (Lockstep's, in ``log_dir``);
    Lightning's other options are taken and not used."""

    def __init__(self, dirpath: _DIR = None, filename: Optional[str] = None, **options: Any) -> None:
        _core.PyTorchProfiler.__init__(self)
        Profiler.__init__(self, dirpath, filename)


XLAProfiler = refused_class(__name__, "XLAProfiler", "Trainer(profiler='pytorch') (TPUs are not supported)")


def __getattr__(name: str) -> object:
    raise not_provided("pytorch_lightning.profilers", name, "Trainer(profiler='simple' | 'advanced' | 'pytorch')")
