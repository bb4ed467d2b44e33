"""The training step's own work, guarded by a count that a noisy machine cannot move.

A timed assert would fail on a busy machine and pass a regression on a quiet one. Instead these
tests count the Python-level calls into ``trainer/`` and ``callbacks/`` per optimizer step
(``sys.setprofile``: every Python function entered, a generator's resumption included) over a
fixed tiny run, and fail when a count grows past the budget written here. The count is exact and
the same on every run: a descriptor read, a hook dispatched to a callback that does not override
it, or a setting read per step where once per epoch would do, each adds at least one call per step.

Per step means: two fits of the same run after a warm-up fit, ``max_steps`` 10 and 30 (both
inside the first epoch, logging every 5 steps), and the difference of their counts divided by
the 20 steps between them; what a fit does once cancels out, what it does every
``log_every_n_steps`` steps is included.

A budget changes only with a ``python -m benchmarks.profile_step`` measurement in the commit message
(docs/performance.md, "Hot-path rules").
"""
from __future__ import annotations

import collections
import dataclasses
import gc
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import callbacks
import trainer
from trainer import Trainer, TrainModule
from trainer.contracts.progress import FitProgress

try:  # the count must not depend on whether an earlier test imported torchmetrics (`self.log` looks for it)
    import torchmetrics  # noqa: F401
except Exception:  # noqa: BLE001 - absent, or broken by its torchvision (tests/helpers/optional.py): no test imports it
    pass

# calls per optimizer step, measured after the hot-path work of issue 46 (21.0, 34.0, 32.5, 51.35),
# plus a margin of less than one call per step (so a single extra call per step fails)
BUDGETS = {
    # (defaults, accumulate_grad_batches): calls per optimizer step
    (False, 1): 21.5,
    (False, 2): 34.5,
    (True, 1): 33.0,
    (True, 2): 52.0,
}
_STEPS = (10, 30)
_ROOTS = tuple(str(Path(pkg.__file__).parent) + "/" for pkg in (trainer, callbacks))


class _Tiny(TrainModule):
    """A one-layer regression that logs its loss, as a user's module does."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _calls(max_steps: int, defaults: bool, accumulate: int, root: Path) -> collections.Counter[str]:
    """Calls into trainer/ and callbacks/ during one fit, by function."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 4), torch.randn(256, 1))
    options: dict[str, Any] = (
        {"default_root_dir": str(root)}  # TensorBoard logger, progress bar, checkpoint, model summary
        if defaults
        else {"logger": False, "enable_progress_bar": False, "enable_checkpointing": False, "enable_model_summary": False}
    )
    t = Trainer(
        accelerator="cpu", max_steps=max_steps, accumulate_grad_batches=accumulate, log_every_n_steps=5, **options
    )
    counts: collections.Counter[str] = collections.Counter()
    ours: dict[Any, str | None] = {}

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        name = ours.get(code, "")
        if name == "":
            name = ours[code] = (
                f"{code.co_filename}:{code.co_firstlineno} {code.co_name}" if code.co_filename.startswith(_ROOTS) else None
            )
        if name is not None:
            counts[name] += 1

    module, loader = _Tiny(), DataLoader(data, batch_size=2)
    # No cyclic garbage collection inside the count: a generator it collects (an earlier loader iterator)
    # is closed, which enters it once more, at a moment that depends on what ran before in this process.
    gc.collect()
    gc.disable()
    sys.setprofile(profile)
    try:
        t.fit(module, loader)
    finally:
        sys.setprofile(None)
        gc.enable()
    return counts


def _per_step(defaults: bool, accumulate: int, tmp_path: Path) -> tuple[float, collections.Counter[str]]:
    _calls(_STEPS[0], defaults, accumulate, tmp_path / "warm-up")  # imports and first-call caches
    short = _calls(_STEPS[0], defaults, accumulate, tmp_path / "short")
    long = _calls(_STEPS[1], defaults, accumulate, tmp_path / "long")
    long.subtract(short)
    return sum(long.values()) / (_STEPS[1] - _STEPS[0]), long


@pytest.mark.skipif(sys.getprofile() is not None, reason="another profiler is active: the count needs sys.setprofile")
@pytest.mark.parametrize("defaults", [False, True], ids=["no-defaults", "defaults"])
@pytest.mark.parametrize("accumulate", [1, 2], ids=["A1", "A2"])
def test_calls_per_optimizer_step_stay_within_budget(defaults: bool, accumulate: int, tmp_path: Path) -> None:
    per_step, by_function = _per_step(defaults, accumulate, tmp_path)
    budget = BUDGETS[defaults, accumulate]
    steps = _STEPS[1] - _STEPS[0]
    top = "\n".join(
        f"  {n / steps:6.2f}  {name.split('/')[-2]}/{name.split('/')[-1]}"
        for name, n in by_function.most_common(25)
        if n
    )
    assert per_step <= budget, (
        f"{per_step:.2f} Python calls into trainer/ and callbacks/ per optimizer step (defaults={defaults}, "
        f"accumulate_grad_batches={accumulate}), over the budget of {budget}. Per step, by function:\n{top}\n"
        "Take the new per-step work out of the step (decide once per fit or epoch, dispatch hooks only to "
        "overriders), or raise the budget with a profile_step measurement in the commit message."
    )


def test_the_count_is_the_same_on_every_run(tmp_path: Path) -> None:
    """The guard is exact: two measurements of the same run agree call for call."""
    first = _per_step(True, 2, tmp_path / "a")[1]
    second = _per_step(True, 2, tmp_path / "b")[1]
    assert +first == +second


def test_fit_progress_per_batch_transitions_keep_every_other_field() -> None:
    """The per-batch transitions construct `FitProgress` positionally (no `dataclasses.replace`):
    each must equal `replace` with only its own fields changed, whatever fields are added."""
    values = [7, 11, 3, 2, False, 96, 32, 1000, True, 40]
    fields = [f.name for f in dataclasses.fields(FitProgress)]
    assert len(fields) == len(values), "a FitProgress field was added: update at_batch, stepped and batch_trained"
    p = FitProgress(*values)
    assert p.at_batch(5) == dataclasses.replace(p, batch_idx=5)
    assert p.stepped() == dataclasses.replace(p, global_step=12)
    assert p.batch_trained(5, True, 128) == dataclasses.replace(
        p, batches_done=6, epoch_finished=True, samples_done=128, batches_total=41
    )
