"""One process with ``shuffle=True`` gives Lightning's numbers, and a hand-written loop's.

The same script runs on Lightning, on Lockstep and as a plain PyTorch loop: a module with dropout,
a dataset whose ``__getitem__`` draws random augmentation, a 2-worker shuffled train loader (the
workers' seeds come from the loader's base seed, drawn from torch's default generator), validation
every epoch after Lightning's sanity check. Every random draw comes from torch's default generator,
so the three runs agree only if the epoch's order is drawn as `RandomSampler` draws it and every
draw happens in the same order (issue 32, items 1 and 2).

`test_hook_and_rng_record_is_lightnings` records, on both frameworks, every hook with the state of
the default generator at that moment and every scheduler step: the two records must be equal.
"""
from __future__ import annotations

import hashlib
import importlib
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from tests.helpers.lightning_parity import framework
from tests.helpers.optional import importorskip

importorskip("lightning")

N_TRAIN, N_VAL, BATCH, EPOCHS = 37, 11, 4, 3


class Augmented(Dataset):
    """``x + noise`` drawn from torch's default generator at each ``__getitem__`` (in a worker,
    that generator is seeded from the loader's base seed)."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 6, generator=g)
        self.y = self.x @ torch.randn(6, 1, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i] + 0.1 * torch.randn(6), self.y[i]


def _loaders(workers: int = 2) -> tuple[DataLoader, DataLoader]:
    train = DataLoader(Augmented(N_TRAIN, 0), batch_size=BATCH, shuffle=True, num_workers=workers)
    val = DataLoader(Augmented(N_VAL, 1), batch_size=BATCH, num_workers=workers)
    return train, val


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Dropout(0.3), nn.Linear(16, 1))


def _module_class(L: Any, record: list[str] | None = None) -> Any:
    class Noisy(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _net()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("val_loss", nn.functional.mse_loss(self.net(x), y))

        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
            if record is not None:
                step = sched.step

                def recorded_step(*args: Any, **kwargs: Any) -> None:
                    record.append(f"scheduler.step {_rng()}")
                    step(*args, **kwargs)

                sched.step = recorded_step  # type: ignore[method-assign]
            return [opt], [sched]

    return Noisy


def _rng() -> str:
    return hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest()[:10]


def _fit(name: str, callbacks: list[Any] | None = None, record: list[str] | None = None, **trainer_args: Any) -> dict[str, torch.Tensor]:
    L, _ = framework(name)
    L.seed_everything(42)
    module = _module_class(L, record)()
    train, val = _loaders()
    args = dict(
        max_epochs=EPOCHS, devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, callbacks=callbacks or [],
    )
    args.update(trainer_args)
    L.Trainer(accelerator="cpu", **args).fit(module, train, val)
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _hand_written() -> dict[str, torch.Tensor]:
    """What Lightning does, written out: seed, build, sanity check (2 val batches, the generator's
    state restored after it), then per epoch the shuffled training pass, validation, the epoch's
    scheduler step."""
    torch.manual_seed(42)
    net = _net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    train, val = _loaders()

    def validate(limit: int | None = None) -> None:
        net.eval()
        with torch.no_grad():
            for i, (x, y) in enumerate(val):
                if limit is not None and i >= limit:
                    break
                nn.functional.mse_loss(net(x), y)
        net.train()

    rng = torch.get_rng_state()  # Lightning's sanity check leaves the generator as it found it
    validate(limit=2)
    torch.set_rng_state(rng)
    for _ in range(EPOCHS):
        for x, y in train:
            loss = nn.functional.mse_loss(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        validate()
        sched.step()
    return {f"net.{k}": v.detach().clone() for k, v in net.state_dict().items()}


def _max_gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.timeout(240)
def test_one_process_shuffled_run_equals_lightning_and_a_hand_written_loop() -> None:
    lockstep = _fit("lockstep")
    lightning = _fit("lightning")
    plain = _hand_written()
    assert _max_gap(lightning, plain) < 1e-6, "the hand-written loop is not what Lightning does"
    assert _max_gap(lockstep, lightning) < 1e-6


def _recorder(L: Any, record: list[str]) -> Any:
    hooks = [
        "setup", "on_fit_start", "on_sanity_check_start", "on_sanity_check_end", "on_train_start",
        "on_train_epoch_start", "on_train_batch_start", "on_before_backward", "on_after_backward",
        "on_before_optimizer_step", "on_before_zero_grad", "on_train_batch_end", "on_validation_start",
        "on_validation_epoch_start", "on_validation_batch_start", "on_validation_batch_end",
        "on_validation_epoch_end", "on_validation_end", "on_train_epoch_end", "on_train_end",
        "on_fit_end", "teardown",
    ]

    def make(hook: str) -> Any:
        def method(self: Any, *args: Any, **kwargs: Any) -> None:
            record.append(f"{hook} {_rng()}")

        return method

    _, cbs = framework("lightning" if L.__name__.startswith("lightning") else "lockstep")
    return type("RngRecorder", (cbs.Callback,), {h: make(h) for h in hooks})()


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"val_check_interval": 0.5},
        {"check_val_every_n_epoch": 2, "limit_train_batches": 5},
        {"num_sanity_val_steps": 0, "limit_val_batches": 2},
    ],
    ids=["every_epoch", "val_check_interval", "every_2_epochs_limited", "no_sanity_check"],
)
def test_hook_and_rng_record_is_lightnings(settings: dict[str, Any]) -> None:
    records = {}
    for name in ("lightning", "lockstep"):
        L, _ = framework(name)
        record: list[str] = []
        _fit(name, callbacks=[_recorder(L, record)], record=record, **settings)
        records[name] = record
    lightning, lockstep = records["lightning"], records["lockstep"]
    first = next((i for i, (a, b) in enumerate(zip(lightning, lockstep)) if a != b), None)
    assert first is None and len(lightning) == len(lockstep), (
        f"records differ at event {first}: Lightning {lightning[first - 2 : first + 3] if first else lightning[-3:]}"
        f" Lockstep {lockstep[first - 2 : first + 3] if first else lockstep[-3:]}"
    )


@pytest.mark.timeout(240)
def test_lr_find_on_shuffled_data_with_dropout_is_lightnings() -> None:
    """The range test's curve from its first point: the same batches, dropout masks and losses."""
    results = {}
    for name in ("lightning", "lockstep"):
        L, _ = framework(name)
        tuner = importlib.import_module("lightning.pytorch.tuner" if name == "lightning" else "trainer.tuner")
        L.seed_everything(42)
        module = _module_class(L)()
        train, val = _loaders()
        trainer = L.Trainer(
            accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
            enable_checkpointing=False, max_epochs=EPOCHS,
        )
        finder = tuner.Tuner(trainer).lr_find(module, train, val, num_training=20, min_lr=1e-4, max_lr=1.0, update_attr=False)
        results[name] = torch.tensor(finder.results["loss"])
    torch.testing.assert_close(results["lockstep"], results["lightning"], rtol=1e-6, atol=1e-7)
