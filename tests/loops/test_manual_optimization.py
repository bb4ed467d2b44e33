"""Manual optimization (``automatic_optimization = False``), checked against hand-written loops.

A GAN-like module with two optimizers, ``toggle_optimizer``, ``manual_backward`` and ``log_dict``
must end with the parameters of the same updates written out in plain torch, on one process and
on two DDP ranks; manual accumulation under ``no_backward_sync`` on two ranks must equal one
process with the whole batch.
"""
from __future__ import annotations

import signal
from typing import Any

import pytest
import torch
from torch import nn

from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET, Regression, assert_params_close, loader, params_of, regression_data
from trainer import Trainer, TrainModule
from trainer.loops.anomaly import NonFiniteLossError

FEATURES, NOISE = 4, 3
DATA = 16


def _gan_data(n: int = DATA) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(1)
    return torch.utils.data.TensorDataset(torch.randn(n, FEATURES, generator=g), torch.randn(n, NOISE, generator=g))


class GAN(TrainModule):
    """Written the way Lightning's GAN examples are (two optimizers, toggled, manual backward)."""

    def __init__(self, lr: float = 0.01, clip: float | None = None, signal_at_step: int | None = None) -> None:
        super().__init__()
        self.automatic_optimization = False
        torch.manual_seed(0)
        self.generator = nn.Sequential(nn.Linear(NOISE, 8), nn.Tanh(), nn.Linear(8, FEATURES))
        self.discriminator = nn.Sequential(nn.Linear(FEATURES, 8), nn.Tanh(), nn.Linear(8, 1))
        self.lr, self.clip, self.signal_at_step = lr, clip, signal_at_step
        self.d_grads_in_g_step: list[bool] = []
        self.first_g_grads: list[torch.Tensor] | None = None  # after the first manual_backward
        self.calls: dict[str, int] = {}

    def training_step(self, batch: Any, batch_idx: int) -> None:
        real, z = batch
        opt_g, opt_d = self.optimizers()
        self.toggle_optimizer(opt_g)
        g_loss = nn.functional.softplus(-self.discriminator(self.generator(z))).mean()
        self.manual_backward(g_loss)
        if self.first_g_grads is None:
            self.first_g_grads = [p.grad.clone() for p in self.generator.parameters()]
        self.d_grads_in_g_step.append(any(p.grad is not None for p in self.discriminator.parameters()))
        if self.clip is not None:
            self.clip_gradients(opt_g, gradient_clip_val=self.clip, gradient_clip_algorithm="norm")
        opt_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)
        if self.global_step == self.signal_at_step:  # between the two steps of a batch
            signal.raise_signal(signal.SIGUSR1)

        self.toggle_optimizer(opt_d)
        fake = self.generator(z).detach()
        d_loss = (
            nn.functional.softplus(-self.discriminator(real)).mean()
            + nn.functional.softplus(self.discriminator(fake)).mean()
        ) / 2
        self.manual_backward(d_loss)
        if self.clip is not None:
            self.clip_gradients(opt_d, gradient_clip_val=self.clip / 10, gradient_clip_algorithm="value")
        opt_d.step()
        opt_d.zero_grad()
        self.untoggle_optimizer(opt_d)
        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True)

    def configure_optimizers(self) -> Any:
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=self.lr, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=self.lr, betas=(0.5, 0.999))
        return [opt_g, opt_d], []

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def on_before_backward(self, loss: torch.Tensor) -> None:
        self._count("on_before_backward")

    def on_after_backward(self) -> None:
        self._count("on_after_backward")

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self._count("on_before_optimizer_step")

    def on_before_zero_grad(self, optimizer: Any) -> None:
        self._count("on_before_zero_grad")


def _hand_written_gan(batch_size: int, epochs: int, clip: float | None = None) -> list[torch.Tensor]:
    """The same updates in plain torch: what the GAN module must end with."""
    module = GAN(clip=clip)
    g, d = module.generator, module.discriminator
    opt_g = torch.optim.Adam(g.parameters(), lr=module.lr, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(d.parameters(), lr=module.lr, betas=(0.5, 0.999))
    for _ in range(epochs):
        for real, z in loader(_gan_data(), batch_size):
            d.requires_grad_(False)
            nn.functional.softplus(-d(g(z))).mean().backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(list(g.parameters()), clip)
            opt_g.step()
            opt_g.zero_grad()
            d.requires_grad_(True)
            g.requires_grad_(False)
            fake = g(z).detach()
            ((nn.functional.softplus(-d(real)).mean() + nn.functional.softplus(d(fake)).mean()) / 2).backward()
            if clip is not None:
                torch.nn.utils.clip_grad_value_(list(d.parameters()), clip / 10)
            opt_d.step()
            opt_d.zero_grad()
            g.requires_grad_(True)
    return params_of(module)


def test_gan_matches_hand_written_loop_and_counts_every_optimizer_step():
    module = GAN()
    trainer = Trainer(accelerator="cpu", max_epochs=2, **QUIET)
    trainer.fit(module, loader(_gan_data(), 4))
    assert_params_close(params_of(module), _hand_written_gan(4, 2), atol=1e-6)
    assert trainer.global_step == 2 * 2 * 4  # as Lightning: every optimizer step counts
    assert set(trainer.callback_metrics) >= {"g_loss", "d_loss"}
    assert module.d_grads_in_g_step == [False] * 8  # toggled off: no gradient for the discriminator
    assert all(p.requires_grad for p in module.parameters())  # untoggled
    # per batch: two manual_backward, two steps; zero_grad is the optimizer's own (no hook, as Lightning)
    assert module.calls == {"on_before_backward": 16, "on_after_backward": 16, "on_before_optimizer_step": 16}


def test_clip_gradients_norm_and_value_match_torch():
    module = GAN(clip=0.05)
    Trainer(accelerator="cpu", max_epochs=1, **QUIET).fit(module, loader(_gan_data(), 4))
    clipped = _hand_written_gan(4, 1, clip=0.05)
    assert_params_close(params_of(module), clipped, atol=1e-6)
    unclipped = _hand_written_gan(4, 1)
    assert max((a - b).abs().max().item() for a, b in zip(clipped, unclipped)) > 1e-3  # clipping mattered


class _ManualRegression(Regression):
    def __init__(self, accumulate: int = 1, lightning_name: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.automatic_optimization = False
        self.accumulate = accumulate
        self.lightning_name = lightning_name  # Lightning's trainer.strategy.block_backward_sync()
        self.grads_after_first_backward: list[torch.Tensor] | None = None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        opt = self.optimizers()
        loss = nn.functional.mse_loss(self(x), y) / self.accumulate
        if (batch_idx + 1) % self.accumulate:
            blocked = self.trainer.strategy.block_backward_sync() if self.lightning_name else self.no_backward_sync()
            with blocked:
                self.manual_backward(loss)
        else:
            self.manual_backward(loss)
        if self.grads_after_first_backward is None:
            self.grads_after_first_backward = [p.grad.clone() for p in self.parameters()]
        if (batch_idx + 1) % self.accumulate == 0:
            opt.step()
            opt.zero_grad()
        sched = self.lr_schedulers()
        if sched is not None and (batch_idx + 1) % self.accumulate == 0:
            sched.step()
        return loss


def test_bf16_mixed_on_cpu_matches_hand_written_autocast_loop():
    module = _ManualRegression(optimizer="adamw")
    Trainer(accelerator="cpu", max_epochs=1, precision="bf16-mixed", **QUIET).fit(module, loader(regression_data(16), 4))
    reference = Regression("adamw")
    opt = reference.configure_optimizers()
    for x, y in loader(regression_data(16), 4):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            nn.functional.mse_loss(reference(x), y).backward()
            opt.step()
            opt.zero_grad()
    assert_params_close(params_of(module), params_of(reference), atol=1e-6)
    unmixed = _ManualRegression(optimizer="adamw")
    Trainer(accelerator="cpu", max_epochs=1, **QUIET).fit(unmixed, loader(regression_data(16), 4))
    assert max((a - b).abs().max().item() for a, b in zip(params_of(module), params_of(unmixed))) > 1e-6


def test_step_with_closure_runs_it_as_the_optimizer_asks_lbfgs():
    class Closure(_ManualRegression):
        def training_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            opt = self.optimizers()

            def closure() -> torch.Tensor:
                opt.zero_grad()
                loss = nn.functional.mse_loss(self(x), y)
                self.manual_backward(loss)
                return loss

            opt.step(closure=closure)

        def configure_optimizers(self) -> Any:
            return torch.optim.LBFGS(self.parameters(), lr=0.5, max_iter=4)

        def on_before_optimizer_step(self, optimizer: Any) -> None:
            self.hook_calls = getattr(self, "hook_calls", 0) + 1

    module = Closure()
    trainer = Trainer(accelerator="cpu", max_epochs=1, **QUIET)
    trainer.fit(module, loader(regression_data(8), 4))
    reference = Closure()
    opt = reference.configure_optimizers()
    for x, y in loader(regression_data(8), 4):

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = nn.functional.mse_loss(reference(x), y)
            loss.backward()
            return loss

        opt.step(closure)
    assert_params_close(params_of(module), params_of(reference), atol=1e-6)
    assert trainer.global_step == 2
    assert module.hook_calls > 2  # after every closure call LBFGS made, as Lightning


def test_automatic_only_trainer_arguments_are_errors():
    data = loader(regression_data(8), 4)
    with pytest.raises(ValueError, match=r"accumulate_grad_batches=2 does not apply to manual optimization"):
        Trainer(accelerator="cpu", max_epochs=1, accumulate_grad_batches=2, **QUIET).fit(_ManualRegression(), data)
    with pytest.raises(ValueError, match=r"gradient_clip_val=1.0 does not apply to manual optimization.*self.clip_gradients"):
        Trainer(accelerator="cpu", max_epochs=1, gradient_clip_val=1.0, **QUIET).fit(_ManualRegression(), data)
    from callbacks import GradientAccumulationScheduler

    with pytest.raises(ValueError, match=r"accumulate_grad_batches=3 does not apply to manual optimization"):
        Trainer(accelerator="cpu", max_epochs=1, callbacks=[GradientAccumulationScheduler({0: 3})], **QUIET).fit(
            _ManualRegression(), data
        )


def test_manual_api_in_automatic_mode_and_bad_return_are_errors():
    class Auto(Regression):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.manual_backward(loss)
            return loss

    with pytest.raises(RuntimeError, match=r"self.manual_backward\(\) is for manual optimization: set self.automatic_optimization = False"):
        Trainer(accelerator="cpu", max_epochs=1, **QUIET).fit(Auto(), loader(regression_data(8), 4))

    class ReturnsStr(_ManualRegression):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            super().training_step(batch, batch_idx)
            return "done"

    with pytest.raises(TypeError, match=r"In manual optimization training_step returns None, a tensor, or a dict.*returned str"):
        Trainer(accelerator="cpu", max_epochs=1, **QUIET).fit(ReturnsStr(), loader(regression_data(8), 4))


def test_non_finite_returned_loss_is_reported():
    class NaNLoss(_ManualRegression):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            return loss * float("nan") if batch_idx == 1 else loss

    with pytest.raises(NonFiniteLossError, match=r"loss is nan at epoch 0, global step 1, batch index 1"):
        Trainer(accelerator="cpu", max_epochs=1, **QUIET).fit(NaNLoss(), loader(regression_data(16), 4))


def test_schedulers_are_the_users_to_step():
    class Scheduled(_ManualRegression):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=1.0)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)]

    module = Scheduled()
    trainer = Trainer(accelerator="cpu", max_epochs=2, **QUIET)
    trainer.fit(module, loader(regression_data(8), 4))
    # 2 epochs x 2 batches, stepped by the module only (the loop's epoch stepping is off)
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.5**4)
    assert trainer.global_step == 4


def test_resume_in_manual_mode_equals_straight_run(tmp_path):
    data = _gan_data()
    straight = GAN()
    Trainer(accelerator="cpu", max_epochs=2, **QUIET).fit(straight, loader(data, 4))
    first = GAN()
    t1 = Trainer(accelerator="cpu", max_steps=6, **QUIET)  # 3 batches of 2 optimizer steps: mid-epoch
    t1.fit(first, loader(data, 4))
    assert (t1.global_step, t1.fit_loop.batches_done) == (6, 3)
    t1.save_checkpoint(tmp_path / "mid.ckpt")
    resumed = GAN()
    t2 = Trainer(accelerator="cpu", max_epochs=2, **QUIET)
    t2.fit(resumed, loader(data, 4), ckpt_path=tmp_path / "mid.ckpt")
    assert t2.global_step == 16
    assert_params_close(params_of(resumed), params_of(straight), atol=1e-6)


def test_preemption_inside_training_step_saves_at_the_batch_end_and_resumes_exactly(tmp_path):
    from trainer.launch.preemption import PREEMPTION_EXIT_CODE

    kw = dict(max_epochs=2, default_root_dir=str(tmp_path), logger=False, enable_progress_bar=False)
    straight = GAN()
    Trainer(accelerator="cpu", max_epochs=2, **QUIET).fit(straight, loader(_gan_data(), 4))
    with pytest.raises(SystemExit) as info:
        Trainer(accelerator="cpu", **kw).fit(GAN(signal_at_step=5), loader(_gan_data(), 4))
    assert info.value.code == PREEMPTION_EXIT_CODE
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    # the signal came after the generator's step of batch 2; the discriminator's step finished it
    assert saved["global_step"] == 6 and saved["loops"]["fit_loop"]["batches_done"] == 3
    resumed = GAN()
    t = Trainer(accelerator="cpu", **kw)
    t.fit(resumed, loader(_gan_data(), 4), ckpt_path="last")
    assert t.global_step == 16
    assert all(torch.equal(a, b) for a, b in zip(straight.parameters(), resumed.parameters()))


def test_several_optimizers_in_automatic_mode_all_step_on_the_same_loss():
    """Our rule (Lightning 2.x raises instead): each optimizer steps on the one loss, every window."""

    class TwoOpts(Regression):
        def configure_optimizers(self) -> Any:
            return [
                torch.optim.SGD(self.net[0].parameters(), lr=0.1),
                torch.optim.Adam(self.net[2].parameters(), lr=0.01),
            ]

    module = TwoOpts()
    trainer = Trainer(accelerator="cpu", max_epochs=1, **QUIET)
    trainer.fit(module, loader(regression_data(16), 4))
    assert trainer.global_step == 4  # one step per window, not per optimizer
    reference = TwoOpts()
    opts = reference.configure_optimizers()
    for x, y in loader(regression_data(16), 4):
        nn.functional.mse_loss(reference(x), y).backward()
        for opt in opts:
            opt.step()
        for opt in opts:
            opt.zero_grad()
    assert_params_close(params_of(module), params_of(reference), atol=1e-6)


@pytest.mark.cuda
def test_16_mixed_scales_steps_and_unscales_before_clipping():
    module = GAN(clip=0.05).cuda()
    Trainer(accelerator="cuda", devices=1, max_epochs=1, precision="16-mixed", **QUIET).fit(module, loader(_gan_data(), 4))
    reference = GAN(clip=0.05).cuda()
    g, d = reference.generator, reference.discriminator
    opt_g = torch.optim.Adam(g.parameters(), lr=reference.lr, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(d.parameters(), lr=reference.lr, betas=(0.5, 0.999))
    scaler = torch.amp.GradScaler("cuda")
    for real, z in loader(_gan_data(), 4):
        real, z = real.cuda(), z.cuda()
        with torch.autocast("cuda", dtype=torch.float16):
            d.requires_grad_(False)
            scaler.scale(nn.functional.softplus(-d(g(z))).mean()).backward()
            scaler.unscale_(opt_g)
            torch.nn.utils.clip_grad_norm_(list(g.parameters()), 0.05)
            scaler.step(opt_g)
            scaler.update()
            opt_g.zero_grad()
            d.requires_grad_(True)
            g.requires_grad_(False)
            fake = g(z).detach()
            loss = (nn.functional.softplus(-d(real)).mean() + nn.functional.softplus(d(fake)).mean()) / 2
            scaler.scale(loss).backward()
            scaler.unscale_(opt_d)
            torch.nn.utils.clip_grad_value_(list(d.parameters()), 0.005)
            scaler.step(opt_d)
            scaler.update()
            opt_d.zero_grad()
            g.requires_grad_(True)
    assert_params_close([p.cpu() for p in params_of(module)], [p.cpu() for p in params_of(reference)], atol=1e-6)


# -- two ranks ---------------------------------------------------------------------------------
MICRO, ACCUMULATE = 2, 2


def _gan_on_ranks(rank: int, world_size: int) -> dict[str, Any]:
    from trainer import DDPStrategy

    module = GAN()
    trainer = Trainer(accelerator="cpu", max_epochs=2, strategy=DDPStrategy(), **QUIET)
    trainer.fit(module, loader(_gan_data(), 2))
    return {"params": params_of(module), "global_step": trainer.global_step, "first_grads": module.first_g_grads}


def _accumulate_on_ranks(rank: int, world_size: int, strategy: str) -> dict[str, Any]:
    module = _ManualRegression(accumulate=ACCUMULATE, lightning_name=strategy == "allreduce", optimizer="adamw")
    trainer = Trainer(accelerator="cpu", max_epochs=2, strategy=strategy, **QUIET)
    trainer.fit(module, loader(regression_data(32), MICRO))
    return {"params": params_of(module), "first_grads": module.grads_after_first_backward}


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_gan_on_two_ranks_equals_one_process_with_the_whole_batch():
    results = run_ranks(_gan_on_ranks, init_group=False, timeout=150)
    # every manual_backward synced: after the first one both ranks hold the same (mean) gradient
    assert_params_close(results[0]["first_grads"], results[1]["first_grads"], atol=0.0)
    big_batch = GAN()
    Trainer(accelerator="cpu", max_epochs=2, **QUIET).fit(big_batch, loader(_gan_data(), 4))
    for r in results:
        assert r["global_step"] == 2 * 2 * 4
        assert_params_close(r["params"], params_of(big_batch), atol=1e-5)
    assert_params_close(results[0]["params"], _hand_written_gan(4, 2), atol=1e-5)


@pytest.mark.distributed
@pytest.mark.timeout(180)
@pytest.mark.parametrize("strategy", ["ddp", "allreduce"])
def test_manual_accumulation_with_no_backward_sync_equals_one_big_batch(strategy):
    results = run_ranks(_accumulate_on_ranks, args=(strategy,), init_group=False, timeout=150)
    # inside no_backward_sync the first backward did not sync: each rank kept its own gradient
    assert any((a - b).abs().max() > 1e-4 for a, b in zip(results[0]["first_grads"], results[1]["first_grads"]))
    big = Regression("adamw")
    Trainer(accelerator="cpu", max_epochs=2, **QUIET).fit(big, loader(regression_data(32), 2 * MICRO * ACCUMULATE))
    for r in results:
        assert_params_close(r["params"], params_of(big), atol=1e-5)
