"""The library census: each library's script run under Lightning and under the runner, and judged.

``python -m tests.census.libraries.driver [NAME ...]`` prints one row per library and process count.
Each run is a fresh subprocess in its own empty folder: ``python SCRIPT`` (the installed Lightning)
or ``python -m trainer.as_lightning SCRIPT`` (Lockstep), with ``LIBRARY_CENSUS_DEVICES`` 1 or 2.
A pair is ``equal`` when every rank ran the framework it should (Lightning's Trainer on one side,
Lockstep's on the other), and each rank's global step, parameters and predictions agree (1e-5).
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
TOLERANCE = 1e-5


@dataclass(frozen=True)
class Library:
    """A census row's library: its distribution, the module it imports, its domain, its script."""

    name: str
    distribution: str
    module: str
    domain: str

    @property
    def script(self) -> Path:
        return HERE / f"lib_{self.name}.py"

    def missing(self) -> str | None:
        """Why this library cannot run here, or None."""
        if importlib.util.find_spec(self.module) is None:
            return f"{self.distribution} is not installed (pip install -r {HERE.relative_to(REPO)}/requirements.txt)"
        return None

    def version(self) -> str:
        return importlib.metadata.version(self.distribution)


LIBRARIES = {lib.name: lib for lib in [
    Library("pytorch_forecasting", "pytorch-forecasting", "pytorch_forecasting", "time series"),
    Library("pytorch_tabular", "pytorch_tabular", "pytorch_tabular", "tabular"),
    Library("chemprop", "chemprop", "chemprop", "chemistry"),
    Library("lightning_uq_box", "lightning-uq-box", "lightning_uq_box", "uncertainty"),
    Library("lightly", "lightly", "lightly", "self-supervised"),
    Library("neuralforecast", "neuralforecast", "neuralforecast", "time series"),
    Library("torchgeo", "torchgeo", "torchgeo", "geospatial"),
    Library("scvi_tools", "scvi-tools", "scvi", "single-cell"),
    Library("gluonts", "gluonts", "gluonts.torch", "time series"),
    Library("anomalib", "anomalib", "anomalib", "anomaly detection"),
]}


@dataclass(frozen=True)
class Verdict:
    """A row: ``equal``, ``differs`` (what) or ``fails`` (which side, its error)."""

    result: str
    reason: str = ""


def run(library: Library, framework: str, devices: int, timeout: float = 900) -> dict[str, Any]:
    """Run ``library``'s script once; the records of its ranks, or its error."""
    with tempfile.TemporaryDirectory(prefix=f"libcensus-{library.name}-{framework}-{devices}-") as folder:
        out = Path(folder) / "record"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               "LIBRARY_CENSUS_DEVICES": str(devices), "LIBRARY_CENSUS_OUT": str(out),
               "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
        runner = ["-m", "trainer.as_lightning"] if framework == "lockstep" else []
        try:
            done = subprocess.run([sys.executable, *runner, str(library.script)], cwd=folder, env=env,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s", "ranks": {}}
        ranks = {int(p.name.rsplit("rank", 1)[1]): torch.load(p, weights_only=False) for p in Path(folder).glob("record.rank*")}
        error = ""
        if done.returncode != 0:
            lines = re.sub(r"\x1b\[[0-9;]*m", "", done.stderr).strip().splitlines()
            error = f"exit {done.returncode}: {lines[-1] if lines else ''}"
        elif len(ranks) != devices:
            error = f"{len(ranks)} rank records for {devices} processes"
        return {"error": error, "ranks": ranks, "stderr": done.stderr[-3000:]}


def _differences(path: str, theirs: Any, ours: Any) -> list[str]:
    if isinstance(theirs, torch.Tensor) and isinstance(ours, torch.Tensor):
        if theirs.shape != ours.shape:
            return [f"{path}: shape {tuple(theirs.shape)} vs {tuple(ours.shape)}"]
        if theirs.is_floating_point() or ours.is_floating_point():
            gap = (theirs.double() - ours.double()).abs().max().item() if theirs.numel() else 0.0
            ok = torch.allclose(theirs.double(), ours.double(), rtol=TOLERANCE, atol=TOLERANCE, equal_nan=True)
            return [] if ok else [f"{path}: max gap {gap:.2e}"]
        return [] if torch.equal(theirs, ours) else [f"{path}: differs"]
    if isinstance(theirs, dict) and isinstance(ours, dict):
        if set(theirs) != set(ours):
            return [f"{path}: keys {sorted(set(theirs) ^ set(ours))[:5]} on one side only"]
        return [d for k in theirs for d in _differences(f"{path}.{k}", theirs[k], ours[k])]
    if isinstance(theirs, list) and isinstance(ours, list):
        if len(theirs) != len(ours):
            return [f"{path}: length {len(theirs)} vs {len(ours)}"]
        return [d for i, (a, b) in enumerate(zip(theirs, ours)) for d in _differences(f"{path}[{i}]", a, b)]
    return [] if theirs == ours else [f"{path}: {theirs!r} vs {ours!r}"]


def judge(theirs: dict[str, Any], ours: dict[str, Any]) -> Verdict:
    """The row for Lightning's run ``theirs`` and Lockstep's ``ours``."""
    if theirs["error"]:
        return Verdict("fails", f"under Lightning: {theirs['error']}")
    if ours["error"]:
        return Verdict("fails", f"Lockstep: {ours['error']}")
    wrong = [f"rank {r} of Lightning's run ran {rec['trainer']}" for r, rec in theirs["ranks"].items()
             if not rec["trainer"].startswith(("lightning.", "pytorch_lightning."))]
    wrong += [f"rank {r} under the runner ran {rec['trainer']}" for r, rec in ours["ranks"].items()
              if not rec["trainer"].startswith("trainer.")]
    if wrong:
        return Verdict("fails", "; ".join(wrong))
    found = []
    for rank in sorted(theirs["ranks"]):
        a, b = theirs["ranks"][rank], ours["ranks"][rank]
        for key in sorted((set(a) | set(b)) - {"trainer"}):
            found += _differences(f"rank {rank} {key}", a.get(key), b.get(key))
    return Verdict("differs", "; ".join(found[:6])) if found else Verdict("equal")


def census_row(library: Library, devices: int) -> Verdict:
    """Run ``library`` on both frameworks on ``devices`` processes and judge the pair."""
    return judge(run(library, "lightning", devices), run(library, "lockstep", devices))


def main(names: list[str]) -> None:
    for name in names or list(LIBRARIES):
        library = LIBRARIES[name]
        why = library.missing()
        for devices in (1, 2):
            verdict = Verdict("skipped", why) if why else census_row(library, devices)
            print(f"| {name} | {devices} | {verdict.result} | {verdict.reason} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
