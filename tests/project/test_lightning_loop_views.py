"""Lightning's loop objects read from outside (``trainer.fit_loop.epoch_loop.val_loop._data_source``,
``epoch_loop.batch_progress``, ``fit_loop.epoch_progress``...): Lockstep answers them with views over
its own loop state (`trainer.lightning.loop_views`). The same module runs under ``lightning.pytorch``
and under Lockstep with a callback that records every value at the hooks libraries read them in; the
records must be equal."""
from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.optional import importorskip

import trainer as lockstep
from trainer.lightning.unsupported import NotProvidedAttributeError

pl = importorskip("lightning.pytorch", reason="needs `lightning` (the dev extra)")
QUIET = {"accelerator": "cpu", "logger": False, "enable_progress_bar": False, "enable_checkpointing": False,
         "enable_model_summary": False}


def _counts(c: Any) -> tuple[int, int, int, int]:
    return c.ready, c.started, c.processed, c.completed


def _progress(p: Any) -> tuple[Any, ...]:
    return _counts(p.current), _counts(p.total), getattr(p, "is_last_batch", None)


def _source(source: Any, module: Any) -> tuple[Any, ...]:
    return source.instance is module, source.name, source.is_module(), source.is_defined()


def _read(trainer: Any, module: Any) -> dict[str, Any]:
    """What libraries read on the loops, at one hook."""
    fit = trainer.fit_loop
    epoch = fit.epoch_loop
    val = epoch.val_loop
    return {
        # epoch_progress before done: Lightning's done sets epoch_progress.current.completed when it is True
        "fit.epoch_progress": _progress(fit.epoch_progress),
        "fit": (fit.max_epochs, fit.min_epochs, fit.max_steps, fit.total_batch_idx, fit.batch_idx, fit.done),
        "fit._data_source": _source(fit._data_source, module),
        "epoch": (epoch._batches_that_stepped, epoch.global_step, epoch.total_batch_idx, epoch.batch_idx,
                  epoch.max_steps, epoch.min_steps),
        "epoch.batch_progress": _progress(epoch.batch_progress),
        "val.batch_progress": _progress(val.batch_progress),
        "val._data_source": _source(val._data_source, module),
    }


def _run(framework: Any, accumulate: int) -> list[tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []

    class Module(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(3, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("val_loss", nn.functional.mse_loss(self.net(x), y))

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.05)

        def train_dataloader(self) -> DataLoader:
            g = torch.Generator().manual_seed(1)
            return DataLoader(TensorDataset(torch.randn(37, 3, generator=g), torch.randn(37, 1, generator=g)),
                              batch_size=4, shuffle=True)

        def val_dataloader(self) -> DataLoader:
            g = torch.Generator().manual_seed(2)
            return DataLoader(TensorDataset(torch.randn(10, 3, generator=g), torch.randn(10, 1, generator=g)),
                              batch_size=4)

    class Reads(framework.Callback):
        def _record(self, hook: str, trainer: Any, module: Any, batch_idx: int | None = None) -> None:
            seen.append((hook, batch_idx, trainer.sanity_checking, _read(trainer, module)))

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            self._record("on_train_batch_start", trainer, module, batch_idx)

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self._record("on_train_batch_end", trainer, module, batch_idx)

        def on_validation_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int,
                                    dataloader_idx: int = 0) -> None:
            self._record("on_validation_batch_end", trainer, module, batch_idx)

        def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
            self._record("on_train_epoch_end", trainer, module)
            # the sources give the loaders, as Lightning's
            seen.append(("loaders", len(trainer.fit_loop._data_source.dataloader()),
                         len(trainer.fit_loop.epoch_loop.val_loop._data_source.dataloader())))

        def on_validation_end(self, trainer: Any, module: Any) -> None:
            self._record("on_validation_end", trainer, module)

    torch.manual_seed(0)
    module = Module()
    t = framework.Trainer(max_epochs=2, val_check_interval=0.5, accumulate_grad_batches=accumulate,
                          callbacks=[Reads()], **QUIET)
    t.fit(module)
    seen.append(("after fit", _read(t, module)))
    return seen


@pytest.mark.parametrize("accumulate", [1, 2])
def test_loop_views_read_as_lightnings_loops_at_every_hook(accumulate):
    expected, got = _run(pl, accumulate), _run(lockstep, accumulate)
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected):
        assert mine == theirs


def test_a_loop_name_lockstep_does_not_keep_names_what_to_use():
    loop = lockstep.Trainer(**QUIET).fit_loop
    with pytest.raises(NotProvidedAttributeError, match=r"fit_loop\.epoch_loop\.automatic_optimization: .*use "):
        loop.epoch_loop.automatic_optimization  # noqa: B018
    with pytest.raises(NotProvidedAttributeError, match=r"fit_loop\._combined_loader: .*use trainer\.train_dataloader"):
        loop._combined_loader  # noqa: B018
    assert not hasattr(loop, "no_such_name") and not hasattr(loop.epoch_loop.val_loop, "no_such_name")
