"""Issue 41 build item 10: at every hook, ``trainer.callback_metrics``, ``logged_metrics`` and
``progress_bar_metrics`` hold what Lightning's hold, with a logger and without one, and the Trainer
adds the default callbacks Lightning adds and no others.

One script, run under the installed Lightning and under ``python -m trainer.as_lightning``, records
the global step and the three dicts at every callback hook of: the lead's probe (one validation per
epoch, ``log_every_n_steps=2``), and a wider run (validation every 2 batches, ``log_dict``,
``logger=False`` values, ``reduce_fx="sum"``, on_step + on_epoch validation values, a value logged in
``on_before_backward`` and in ``on_validation_epoch_end``, then ``validate``, ``test`` and a second
Trainer's ``fit`` of the same module), each with a CSVLogger and with ``logger=False``; and the wider run again with a callback that reads only at a few hooks (what
the dicts hold must not depend on whether anyone read them in between).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.distributed import script_env
from tests.helpers.optional import importorskip

pytestmark = [pytest.mark.launches, pytest.mark.slow, pytest.mark.timeout(300)]

SCRIPT = '''
import json, sys
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import lightning.pytorch as pl

HOOKS = ["setup", "on_fit_start", "on_sanity_check_start", "on_sanity_check_end", "on_train_start",
         "on_train_epoch_start", "on_train_batch_start", "on_before_backward", "on_after_backward",
         "on_before_optimizer_step", "on_before_zero_grad", "on_train_batch_end", "on_validation_start",
         "on_validation_epoch_start", "on_validation_batch_start", "on_validation_batch_end",
         "on_validation_epoch_end", "on_validation_end", "on_train_epoch_end", "on_train_end", "on_fit_end",
         "on_test_start", "on_test_epoch_start", "on_test_batch_start", "on_test_batch_end", "on_test_epoch_end",
         "on_test_end", "teardown"]


def plain(d):
    return {k: round(float(v), 5) for k, v in sorted(d.items())}


class Watch(pl.Callback):
    def __init__(self):
        self.seen = []

    def see(self, hook, trainer):
        self.seen.append([hook, trainer.global_step, plain(trainer.callback_metrics), plain(trainer.logged_metrics),
                          plain(trainer.progress_bar_metrics)])


for _h in HOOKS:
    def _make(h):
        return lambda self, trainer, *a, **k: self.see(h, trainer)
    setattr(Watch, _h, _make(_h))


class Sparse(Watch):
    pass


for _h in HOOKS:
    if _h not in ("on_train_start", "on_validation_epoch_start", "on_validation_end", "on_train_epoch_end", "on_fit_end"):
        setattr(Sparse, _h, getattr(pl.Callback, _h))


class Probe(pl.LightningModule):  # the lead's probe, as written
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        loss = nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("train_loss", loss, prog_bar=True)
        self.log("train_acc", loss * 2, on_step=True, on_epoch=True)
        self.log("epoch_only", loss * 3, on_step=False, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        loss = nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("val_loss", loss, prog_bar=True)
        self.log("val_step", loss, on_step=True, on_epoch=False)

    def on_train_epoch_end(self):
        self.log("epoch_end_metric", float(self.current_epoch) + 0.5)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Wide(Probe):
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.log("hidden", loss * 4, logger=False, prog_bar=True)
        self.log("summed", loss, on_step=True, on_epoch=True, reduce_fx="sum", logger=True, prog_bar=True)
        self.log_dict({"d_a": loss + 1, "d_b": loss + 2}, on_step=True, on_epoch=False)
        return loss

    def on_before_backward(self, loss):
        self.log("before_bw", loss * 5)

    def validation_step(self, batch, batch_idx):
        super().validation_step(batch, batch_idx)
        loss = nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("val_both", loss * 2, on_step=True, on_epoch=True, prog_bar=True)
        self.log_dict({"val_d": loss + 1, "val_hidden": loss + 2}, logger=False)

    def on_validation_epoch_end(self):
        self.log("val_epoch_end", float(self.current_epoch) + 0.25, prog_bar=True)

    def test_step(self, batch, batch_idx):
        loss = nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("test_loss", loss, prog_bar=True)
        self.log("test_both", loss, on_step=True, on_epoch=True)


def data():
    x = torch.randn(10, 3)
    y = x.sum(1, keepdim=True)
    return DataLoader(TensorDataset(x, y), batch_size=3), DataLoader(TensorDataset(x[:5], y[:5]), batch_size=2)


def logger_args(mode, name):
    return dict(logger=pl.loggers.CSVLogger(f"logs_{name}_{mode}")) if mode == "logger" else dict(logger=False)


out = {}
for mode in ("logger", "none"):
    torch.manual_seed(0)
    train, val = data()
    watch = Watch()
    trainer = pl.Trainer(accelerator="cpu", max_epochs=2, log_every_n_steps=2, callbacks=[watch],
                         enable_progress_bar=True, num_sanity_val_steps=1, enable_model_summary=False,
                         default_root_dir=f"root_probe_{mode}", **logger_args(mode, "probe"))
    trainer.fit(Probe(), train, val)
    out[f"probe/{mode}"] = {"callbacks": [type(c).__name__ for c in trainer.callbacks], "seen": watch.seen}

    torch.manual_seed(0)
    train, val = data()
    watch = Watch()
    model = Wide()
    trainer = pl.Trainer(accelerator="cpu", max_epochs=2, log_every_n_steps=3, callbacks=[watch], val_check_interval=2,
                         num_sanity_val_steps=1, default_root_dir=f"root_wide_{mode}", **logger_args(mode, "wide"))
    trainer.fit(model, train, val)
    result = {"callbacks": [type(c).__name__ for c in trainer.callbacks]}
    result["validate"] = [plain(d) for d in trainer.validate(model, val, verbose=False)]
    result["test"] = [plain(d) for d in trainer.test(model, val, verbose=False)]
    again = pl.Trainer(accelerator="cpu", max_epochs=1, log_every_n_steps=1, callbacks=[watch], num_sanity_val_steps=0,
                       enable_progress_bar=False, default_root_dir=f"root_again_{mode}", **logger_args(mode, "again"))
    again.fit(model, train, val)
    result["callbacks_again"] = [type(c).__name__ for c in again.callbacks]
    result["seen"] = watch.seen
    out[f"wide/{mode}"] = result

    # no reads between these hooks: what the dicts hold must not depend on whether someone looked
    torch.manual_seed(0)
    train, val = data()
    sparse = Sparse()
    trainer = pl.Trainer(accelerator="cpu", max_epochs=2, log_every_n_steps=3, callbacks=[sparse], val_check_interval=2,
                         num_sanity_val_steps=1, enable_progress_bar=False, default_root_dir=f"root_sparse_{mode}",
                         **logger_args(mode, "sparse"))
    trainer.fit(Wide(), train, val)
    out[f"sparse/{mode}"] = {"seen": sparse.seen}
print(json.dumps(out))
'''


def _run(tmp_path, *runner: str) -> dict:
    (tmp_path / "script.py").write_text(SCRIPT)
    done = subprocess.run([sys.executable, *runner, "script.py"], cwd=tmp_path, env=script_env(None),
                          capture_output=True, text=True, timeout=250)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _differences(theirs: dict, ours: dict) -> list[str]:
    """Every observation that differs, named by run, index, hook and dict."""
    found = []
    for run, want in theirs.items():
        got = ours[run]
        for key in sorted(set(want) | set(got)):
            if key != "seen" and want.get(key) != got.get(key):
                found.append(f"{run} {key}: Lightning {want.get(key)} Lockstep {got.get(key)}")
        if len(want["seen"]) != len(got["seen"]):
            found.append(f"{run}: {len(want['seen'])} hook calls under Lightning, {len(got['seen'])} under Lockstep")
        for i, (w, g) in enumerate(zip(want["seen"], got["seen"])):
            for field, name in enumerate(("hook", "global_step", "callback_metrics", "logged_metrics",
                                          "progress_bar_metrics")):
                if w[field] != g[field]:
                    found.append(f"{run} #{i} {w[0]} {name}: Lightning {w[field]} Lockstep {g[field]}")
    return found


def test_the_three_metric_dicts_and_the_default_callbacks_are_lightning_s_at_every_hook(tmp_path):
    importorskip("lightning", reason="the differential test runs the installed Lightning")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "ours").mkdir()
    theirs = _run(tmp_path / "theirs")
    ours = _run(tmp_path / "ours", "-m", "trainer.as_lightning")
    differences = _differences(theirs, ours)
    assert not differences, f"{len(differences)} differences:\n" + "\n".join(differences[:40])
    # the runs observed what they were written to observe
    assert len(theirs["probe/logger"]["seen"]) == 86 and len(theirs["wide/none"]["seen"]) > 150
    assert ours["probe/logger"]["callbacks"][0] == "Watch" and "LearningRateMonitor" not in ours["wide/logger"]["callbacks"]
