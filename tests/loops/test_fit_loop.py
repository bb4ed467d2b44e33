"""The single-process fit loop: limits, validation schedule, schedulers, clipping, metrics."""
from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import Trainer, TrainModule


class Recorder(Regression):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.events = []

    def on_train_epoch_start(self):
        self.events.append(("epoch", self.current_epoch))

    def on_validation_start(self):
        self.events.append(("val", self.current_epoch, self.trainer.fit_loop.batch_idx, self.trainer.sanity_checking))

    def validation_step(self, batch, batch_idx):
        self.events.append(("val_batch", batch_idx))
        super().validation_step(batch, batch_idx)


def test_max_steps_stops_mid_epoch_without_ending_the_epoch(tmp_path):
    from callbacks import Callback, ModelCheckpoint

    class EpochEnds(Callback):
        def __init__(self):
            self.ends = []

        def on_train_epoch_end(self, trainer, module):
            self.ends.append(trainer.current_epoch)

    ends = EpochEnds()
    saves = ModelCheckpoint(dirpath=tmp_path)
    t = Trainer(accelerator="cpu", max_steps=5, callbacks=[ends, saves], **{**QUIET, "enable_checkpointing": True})
    t.fit(Regression(), loader(regression_data(32), 4))  # 8 batches per epoch
    # the epoch is not over: no epoch-end hooks, same epoch, and the position is kept ...
    assert t.global_step == 5 and t.current_epoch == 0 and ends.ends == []
    assert t.fit_loop.batches_done == 5 and not t.fit_loop.epoch_finished
    # ... and ModelCheckpoint (no monitor) still saves the final state, which resumes at batch 5
    assert os.path.basename(saves.best_model_path) == "epoch=0-step=5.ckpt"
    ckpt = torch.load(saves.best_model_path, weights_only=True)
    ours = {k: v for k, v in ckpt["loops"]["fit_loop"].items() if not k.startswith(("epoch_loop.", "epoch_progress"))}
    assert ckpt["epoch"] == 0 and ours == {
        "batches_done": 5, "epoch_finished": False, "samples_done": 20, "global_batch_size": 4, "dataset_size": 32,
        "shuffle": False, "batches_total": 5,
    }
    t2 = Trainer(accelerator="cpu", max_steps=10, callbacks=[ends], **QUIET)
    t2.fit(Regression(), loader(regression_data(32), 4), ckpt_path=saves.best_model_path)
    assert t2.global_step == 10 and t2.current_epoch == 1 and ends.ends == [0]  # epoch 0 ends once, at batch 8


def test_max_epochs_default_and_limits():
    t = Trainer(accelerator="cpu", max_epochs=2, limit_train_batches=3, **QUIET)
    t.fit(Regression(), loader(regression_data(32), 4))
    assert t.global_step == 6
    t = Trainer(accelerator="cpu", max_epochs=1, limit_train_batches=0.5, **QUIET)
    t.fit(Regression(), loader(regression_data(32), 4))
    assert t.global_step == 4
    assert Trainer(accelerator="cpu", **QUIET).max_epochs == 1000


def test_sanity_check_and_validation_schedule():
    m = Recorder()
    data = regression_data(32)
    t = Trainer(accelerator="cpu", max_epochs=2, val_check_interval=0.5, num_sanity_val_steps=1, limit_val_batches=2, **QUIET)
    t.fit(m, loader(data, 4), loader(data, 8))
    vals = [e for e in m.events if e[0] == "val"]
    # sanity (1 batch; no training batch yet: -1, as Lightning's fit_loop.batch_idx), then after batches 4 and 8 of each epoch
    assert vals == [("val", 0, -1, True), ("val", 0, 3, False), ("val", 0, 7, False), ("val", 1, 3, False), ("val", 1, 7, False)]
    sanity_batches = m.events[: m.events.index(("epoch", 0))]
    assert [e for e in sanity_batches if e[0] == "val_batch"] == [("val_batch", 0)]
    assert "val_loss" in t.callback_metrics


def test_check_val_every_n_epoch_and_int_interval():
    m = Recorder()
    data = regression_data(32)
    t = Trainer(accelerator="cpu", max_epochs=4, check_val_every_n_epoch=2, num_sanity_val_steps=0, **QUIET)
    t.fit(m, loader(data, 4), loader(data, 8))
    assert [e[1] for e in m.events if e[0] == "val"] == [1, 3]
    m = Recorder()
    t = Trainer(accelerator="cpu", max_epochs=1, val_check_interval=3, num_sanity_val_steps=0, **QUIET)
    t.fit(m, loader(data, 4), loader(data, 8))
    assert [e[2] for e in m.events if e[0] == "val"] == [2, 5]


class Scheduled(Regression):
    def __init__(self, interval, frequency=1):
        super().__init__()
        self.interval, self.frequency = interval, frequency

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": self.interval, "frequency": self.frequency}}


@pytest.mark.parametrize("interval, frequency, expected_steps", [("step", 1, 8), ("step", 4, 2), ("epoch", 1, 2)])
def test_scheduler_interval_and_frequency(interval, frequency, expected_steps):
    m = Scheduled(interval, frequency)
    t = Trainer(accelerator="cpu", max_epochs=2, accumulate_grad_batches=2, **QUIET)
    t.fit(m, loader(regression_data(32), 4))  # 8 batches/epoch, A=2 -> 4 steps/epoch
    assert t.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.5**expected_steps)


def test_tuple_and_list_formats():
    class Tuple(Regression):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=1.0)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.1)]

    t = Trainer(accelerator="cpu", max_epochs=2, **QUIET)
    t.fit(Tuple(), loader(regression_data(16), 4))
    assert t.lr_scheduler_configs[0].interval == "epoch"
    assert t.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.01)


def test_plateau_scheduler_uses_monitored_metric():
    class Plateau(Regression):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=1e-6)
            sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "val_loss"}}

    data = regression_data(16)
    t = Trainer(accelerator="cpu", max_epochs=3, num_sanity_val_steps=0, **QUIET)
    t.fit(Plateau(), loader(data, 4), loader(data, 4))
    assert t.optimizers[0].param_groups[0]["lr"] < 1e-6  # no improvement with a tiny LR -> reduced


class GradProbe(Regression):
    def __init__(self):
        super().__init__(lr=0.0)
        self.max_abs, self.norms = [], []

    def on_before_optimizer_step(self, optimizer):
        self.norms.append(torch.cat([p.grad.flatten() for p in self.parameters()]).norm().item())

    def on_before_zero_grad(self, optimizer):
        # Lightning's place: the next window's first batch, before its backward (the last step's
        # gradients, clipped); the first window has none yet
        if any(p.grad is None for p in self.parameters()):
            return
        grads = torch.cat([p.grad.flatten() for p in self.parameters()])
        self.max_abs.append(grads.abs().max().item())
        self.after_clip = grads.norm().item()
        self.norms_after = getattr(self, "norms_after", []) + [grads.norm().item()]


def test_gradient_clipping_by_norm_and_value():
    data = loader(regression_data(16) , 4)
    m = GradProbe()
    Trainer(accelerator="cpu", max_epochs=1, gradient_clip_val=0.01, **QUIET).fit(m, data)
    assert max(m.norms) > 0.01  # before clipping (hook runs before the clip)
    assert max(m.norms_after) <= 0.01 + 1e-6
    m = GradProbe()
    Trainer(accelerator="cpu", max_epochs=1, gradient_clip_val=0.001, gradient_clip_algorithm="value", **QUIET).fit(m, data)
    assert max(m.max_abs) <= 0.001 + 1e-9


class Weighted(Regression):
    def training_step(self, batch, batch_idx):
        x, _ = batch
        loss = super().training_step(batch, batch_idx)
        self.log("first_x", x[0, 0], on_step=True, on_epoch=True, prog_bar=True)
        self.log("n", float(len(x)), on_step=False, on_epoch=True, reduce="sum")
        self.log("peak", x.max(), on_epoch=True, on_step=False, reduce="max")
        return loss

    def validation_step(self, batch, batch_idx):
        x, _ = batch
        self.log("val_mean_x", x[:, 0].mean())


def test_metric_aggregation_is_weighted_by_batch_size():
    data = regression_data(10)
    x = data.tensors[0]
    t = Trainer(accelerator="cpu", max_epochs=1, num_sanity_val_steps=0, **QUIET)
    t.fit(Weighted(), loader(data, 4), loader(data, 4))  # batches of 4, 4, 2
    m = t.callback_metrics
    expected = (x[0, 0] * 4 + x[4, 0] * 4 + x[8, 0] * 2) / 10
    assert m["first_x_epoch"].item() == pytest.approx(expected.item(), abs=1e-6)
    assert m["first_x_step"].item() == pytest.approx(x[8, 0].item())
    assert m["n"].item() == 10
    assert m["peak"].item() == pytest.approx(x.max().item())
    assert m["val_mean_x"].item() == pytest.approx(x[:, 0].mean().item(), abs=1e-6)  # exact mean, not mean of means
    # Lightning 2's: the prog_bar=True values only (forked names), no returned `loss`
    assert "first_x_epoch" in t.progress_bar_metrics and "loss" not in t.progress_bar_metrics


def test_validate_test_predict_return_values():
    data = regression_data(12)
    m = Regression()
    t = Trainer(accelerator="cpu", max_epochs=1, **QUIET)
    t.fit(m, loader(data, 4))
    x, y = data.tensors
    with torch.no_grad():
        expected = nn.functional.mse_loss(m(x), y).item()
    (val,) = t.validate(m, loader(data, 5))
    (test,) = t.test(dataloaders=loader(data, 5))
    assert val["val_loss"] == pytest.approx(expected, rel=1e-5)
    assert test["test_loss"] == pytest.approx(expected, rel=1e-5)
    preds = t.predict(m, loader(data, 5))
    assert [p.shape[0] for p in preds] == [5, 5, 2]
    two = t.validate(m, [loader(data, 4), loader(data, 6)])
    assert set(two[0]) == {"val_loss/dataloader_idx_0"} and set(two[1]) == {"val_loss/dataloader_idx_1"}


def test_every_module_has_its_own_hparams():
    class Plain(TrainModule):
        pass

    first, second = Plain(), Plain()
    assert first.hparams == {} and first.hparams is not second.hparams
    first.hparams["lr"] = 0.1  # before save_hyperparameters: this module's dict only
    assert second.hparams == {} and Plain().hparams == {} and TrainModule().hparams == {}
    saved = Regression(lr=0.3)
    assert saved.hparams["lr"] == 0.3 and first.hparams == {"lr": 0.1} and Regression().hparams["lr"] == 0.05


def test_save_hyperparameters_and_module_properties():
    m = Regression(optimizer="adamw", lr=0.01)
    assert m.hparams == {"optimizer": "adamw", "lr": 0.01, "features": 4, "seed": 0}
    t = Trainer(accelerator="cpu", max_epochs=1, **QUIET)
    t.fit(m, loader(regression_data(8), 4))
    assert (m.trainer is t, m.global_rank, m.local_rank, m.world_size, m.current_epoch, m.global_step) == (True, 0, 0, 1, 1, 2)
    assert m.device == torch.device("cpu")
    assert (t.global_rank, t.local_rank, t.node_rank, t.world_size, t.is_global_zero) == (0, 0, 0, 1, True)
    assert t.global_batch_size == 4 and t.micro_batch_size == 4


def test_bf16_mixed_on_cpu_trains():
    dtypes = []

    class Probe(Regression):
        def training_step(self, batch, batch_idx):
            dtypes.append(self.net[0](batch[0]).dtype)
            return super().training_step(batch, batch_idx)

    m = Probe()
    t = Trainer(accelerator="cpu", max_epochs=2, precision="bf16-mixed", **QUIET)
    t.fit(m, loader(regression_data(32), 8))
    assert dtypes[0] == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in m.parameters())
    assert torch.isfinite(t.callback_metrics["train_loss"])


def test_checkpoint_save_and_resume_at_epoch_boundary(tmp_path):
    data = regression_data(32)
    straight = Regression(optimizer="adamw")
    Trainer(accelerator="cpu", max_epochs=2, **QUIET).fit(straight, loader(data, 8))

    first = Regression(optimizer="adamw")
    t1 = Trainer(accelerator="cpu", max_epochs=1, **QUIET)
    t1.fit(first, loader(data, 8))
    t1.save_checkpoint(tmp_path / "e1.ckpt")
    resumed = Regression(optimizer="adamw", seed=123)  # different init: everything comes from the file
    t2 = Trainer(accelerator="cpu", max_epochs=2, **QUIET)
    t2.fit(resumed, loader(data, 8), ckpt_path=tmp_path / "e1.ckpt")
    assert t2.global_step == 8 and t2.current_epoch == 2
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def test_checkpoint_written_at_epoch_end_resumes_at_the_next_epoch(tmp_path):
    from callbacks import Callback

    class SaveAfterFirstEpoch(Callback):
        def on_train_epoch_end(self, trainer, module):
            if trainer.current_epoch == 0:
                trainer.save_checkpoint(tmp_path / "epoch0.ckpt")

    data = regression_data(32)
    straight = Regression(optimizer="adamw")
    Trainer(accelerator="cpu", max_epochs=2, callbacks=[SaveAfterFirstEpoch()], **QUIET).fit(straight, loader(data, 8))
    resumed = Regression(optimizer="adamw", seed=5)
    t = Trainer(accelerator="cpu", max_epochs=2, **QUIET)
    t.fit(resumed, loader(data, 8), ckpt_path=tmp_path / "epoch0.ckpt")
    assert t.global_step == 8
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def test_plateau_monitor_at_the_top_level_of_the_dict():
    class Plateau(Regression):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=1e-6)
            sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
            return {"optimizer": opt, "lr_scheduler": sched, "monitor": "val_loss"}

    data = regression_data(16)
    t = Trainer(accelerator="cpu", max_epochs=2, num_sanity_val_steps=0, **QUIET)
    t.fit(Plateau(), loader(data, 4), loader(data, 4))
    assert t.lr_scheduler_configs[0].monitor == "val_loss"


def _worker_draws(_):
    import random

    return torch.tensor([torch.rand(()).item(), random.random()])


def test_seed_everything_workers_gives_each_rank_its_own_worker_seeds():
    from trainer import seed_everything
    from trainer.seed import install_worker_seeding

    seed_everything(7, workers=True)
    try:
        draws = []
        for rank in (0, 1):
            torch.manual_seed(7)  # ranks seeded alike draw the same base seed
            dl = torch.utils.data.DataLoader(range(2), batch_size=None, num_workers=1, collate_fn=_worker_draws)
            install_worker_seeding(dl, rank)
            assert dl.worker_init_fn is not None
            draws.append(torch.stack(list(dl)))
        assert not torch.equal(draws[0], draws[1])
    finally:
        seed_everything(0)


def _trained_with_sanity_steps(steps: int) -> list[torch.Tensor]:
    from trainer import seed_everything

    seed_everything(3)
    module = Regression()
    data = regression_data(32)
    trainer = Trainer(accelerator="cpu", max_epochs=2, num_sanity_val_steps=steps, **QUIET)
    trainer.fit(module, loader(data, 4, shuffle=True), loader(data, 4))
    return [p.detach().clone() for p in module.parameters()]


def test_the_sanity_check_draws_no_random_numbers_training_is_the_same_without_it():
    # each DataLoader iterator draws a seed from torch's RNG: unisolated, the sanity check's
    # validation loader would change the shuffled training order (Lightning isolates it too)
    with_check, without = _trained_with_sanity_steps(2), _trained_with_sanity_steps(0)
    for a, b in zip(with_check, without):
        assert torch.equal(a, b)
