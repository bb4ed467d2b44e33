"""The module of the hook comparisons (tests/loops/test_lightning_hooks.py, test_hook_precision.py):
one class body that overrides every optimization, batch-transfer and mode hook and records each call
with its arguments. It is put on Lightning's ``LightningModule`` or on Lockstep's ``TrainModule``
(the framework's base class comes second in the bases); nothing here imports Lightning.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from callbacks.callback import Callback
from tests.helpers.models import QUIET
from trainer import Trainer, TrainModule

FIT = dict(max_epochs=2, min_epochs=3, accumulate_grad_batches=2, gradient_clip_val=0.05,
           gradient_clip_algorithm="norm", limit_val_batches=2, num_sanity_val_steps=1)


def hook_data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True) + 0.1 * torch.randn(n, 1, generator=g))


def hook_loader(n: int, seed: int = 0) -> DataLoader:
    return DataLoader(hook_data(n, seed), batch_size=2)


def record_arg(value: Any) -> Any:
    """A framework-neutral record of a hook argument."""
    if isinstance(value, torch.Tensor):
        return round(float(value.detach()), 5) if value.numel() == 1 else tuple(value.shape)
    if isinstance(value, torch.optim.Optimizer) or hasattr(value, "param_groups"):
        return "optimizer"
    if isinstance(value, torch.optim.lr_scheduler.LRScheduler):
        return "scheduler"
    if isinstance(value, torch.device):
        return value.type
    if isinstance(value, (list, tuple)):
        return tuple(record_arg(v) for v in value)
    if callable(value):
        return "closure"
    return getattr(value, "value", value)  # Lightning passes its clip algorithm as a str enum


class HookBody:
    """The shared class body; the framework's base class comes second in the bases."""

    def __init__(self, events: list[Any], callback: Any) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        self.events = events
        self.callback = callback

    def rec(self, name: str, *args: Any) -> None:
        self.events.append((name, *(record_arg(a) for a in args)))

    def forward(self, x):
        return self.net(x)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.8)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def configure_callbacks(self):
        self.rec("configure_callbacks")
        return [self.callback]

    def training_step(self, batch, batch_idx):
        self.rec("training_step", batch_idx)
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def validation_step(self, batch, batch_idx):
        self.rec("validation_step", batch_idx, self.training)
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y))

    def test_step(self, batch, batch_idx):
        self.rec("test_step", batch_idx, self.training)
        x, y = batch
        self.log("test_loss", nn.functional.mse_loss(self(x), y))

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        self.rec("predict_step", batch_idx, self.training)
        return self(batch[0])

    # the optimization step
    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        self.rec("optimizer_step", epoch, batch_idx, optimizer, optimizer_closure)
        if self.trainer.global_step < 2:  # a warm-up, as real projects write it
            for group in optimizer.param_groups:
                group["lr"] = 0.1 * (self.trainer.global_step + 1) / 2
        loss = optimizer.step(closure=optimizer_closure)
        self.rec("closure returned", loss)

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        self.rec("optimizer_zero_grad", epoch, batch_idx, optimizer)
        optimizer.zero_grad()

    def lr_scheduler_step(self, scheduler, metric):
        self.rec("lr_scheduler_step", scheduler, metric)
        scheduler.step()

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        self.rec("configure_gradient_clipping", optimizer, gradient_clip_val, gradient_clip_algorithm)
        self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm=gradient_clip_algorithm)

    def backward(self, loss, *args, **kwargs):
        self.rec("backward", loss)
        loss.backward(*args, **kwargs)

    def on_before_backward(self, loss):
        self.rec("on_before_backward", loss)

    def on_after_backward(self):
        grad = self.net[0].weight.grad  # under FSDP, None until the window's reduce-scatter
        self.rec("on_after_backward", None if grad is None else grad.norm())

    def on_before_optimizer_step(self, optimizer):
        self.rec("on_before_optimizer_step", optimizer)

    def on_before_zero_grad(self, optimizer):
        self.rec("on_before_zero_grad", optimizer)

    def on_train_epoch_end(self):
        self.rec("on_train_epoch_end", self.current_epoch)
        self.trainer.should_stop = True  # min_epochs=3 keeps training: max_epochs=2 ends it

    # batches
    def on_before_batch_transfer(self, batch, dataloader_idx):
        self.rec("on_before_batch_transfer", dataloader_idx)
        return batch

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        self.rec("transfer_batch_to_device", device, dataloader_idx)
        return [t.to(device) for t in batch]

    def on_after_batch_transfer(self, batch, dataloader_idx):
        self.rec("on_after_batch_transfer", dataloader_idx)
        x, y = batch
        return [x * 1.0, y]

    # modes
    def on_validation_model_zero_grad(self):
        self.rec("on_validation_model_zero_grad")
        super().on_validation_model_zero_grad()

    def on_validation_model_eval(self):
        self.rec("on_validation_model_eval")
        super().on_validation_model_eval()

    def on_validation_model_train(self):
        self.rec("on_validation_model_train")
        super().on_validation_model_train()

    def on_test_model_eval(self):
        self.rec("on_test_model_eval")
        super().on_test_model_eval()

    def on_test_model_train(self):
        self.rec("on_test_model_train")
        super().on_test_model_train()

    def on_predict_model_eval(self):
        self.rec("on_predict_model_eval")
        super().on_predict_model_eval()


class _Grab(Callback):
    """The whole parameters at the end of training, while an FSDP process group still exists."""

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self.params = [p.full_tensor() if hasattr(p, "full_tensor") else p.detach().clone() for p in module.parameters()]


def fit_hook_module(root: str, batch_size: int, **kwargs: Any) -> dict[str, Any]:
    """Fit `HookBody` on Lockstep (the `FIT` settings); its parameters (whole, also under FSDP) and step counts."""
    events: list[Any] = []
    grab = _Grab()
    module = type("M", (HookBody, TrainModule), {})(events, grab)
    trainer = Trainer(accelerator="cpu", default_root_dir=root, **QUIET, **FIT, **kwargs)
    trainer.fit(module, DataLoader(hook_data(8, 0), batch_size=batch_size), DataLoader(hook_data(4, 1), batch_size=batch_size))
    return {"params": grab.params, "global_step": trainer.global_step,
            "steps": sum(e[0] == "optimizer_step" for e in events),
            "clipped": sum(e[0] == "configure_gradient_clipping" for e in events)}
