"""Every bad input gets a clear error, before training work where it can be known then."""
from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.models import QUIET, Regression, loader, regression_data
from trainer import Trainer, TrainModule


def _fit(module, data=None, **kw):
    trainer = Trainer(accelerator="cpu", max_epochs=1, **{**QUIET, **kw})
    trainer.fit(module, data if data is not None else loader(regression_data(16), 4))
    return trainer


class NoStep(TrainModule):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class NoOptim(TrainModule):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        return self.w.sum()


def test_module_without_training_step():
    with pytest.raises(NotImplementedError, match=r"NoStep does not define training_step\(\)"):
        _fit(NoStep())


def test_module_without_configure_optimizers():
    with pytest.raises(NotImplementedError, match=r"NoOptim does not define configure_optimizers\(\)"):
        _fit(NoOptim())


def test_not_a_train_module():
    with pytest.raises(TypeError, match="needs a TrainModule subclass instance, got Linear"):
        Trainer(accelerator="cpu", **QUIET).fit(torch.nn.Linear(1, 1))


class Returns(Regression):
    def __init__(self, what):
        super().__init__()
        self.what = what

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        if self.what == "none":
            return None
        if self.what == "dict":
            return {"value": loss}
        if self.what == "vector":
            return loss.expand(3)
        if self.what == "detached":
            return loss.detach()
        return {"loss": loss}


def test_step_returning_none():
    with pytest.raises(TypeError, match="training_step must return a loss tensor or a dict with key 'loss'; "
                       "at batch index 0 it returned an object of type NoneType"):
        _fit(Returns("none"))


def test_step_returning_dict_without_loss():
    with pytest.raises(TypeError, match=r"a dict without 'loss' \(keys \['value'\]\)"):
        _fit(Returns("dict"))


def test_non_scalar_loss():
    with pytest.raises(ValueError, match=r"must return a scalar loss; at batch index 0 it has shape \(3,\)"):
        _fit(Returns("vector"))


def test_detached_loss():
    with pytest.raises(ValueError, match="does not require grad"):
        _fit(Returns("detached"))


def test_dict_with_loss_is_fine():
    assert _fit(Returns("ok")).global_step == 4


@pytest.mark.parametrize("value", [0, -1])
def test_accumulate_grad_batches_below_one(value):
    with pytest.raises(ValueError, match=f"accumulate_grad_batches must be >= 1, got {value}"):
        Trainer(accelerator="cpu", accumulate_grad_batches=value, **QUIET)


def test_accumulate_grad_batches_not_int():
    with pytest.raises(TypeError, match="accumulate_grad_batches must be an int, got 2.0"):
        Trainer(accelerator="cpu", accumulate_grad_batches=2.0, **QUIET)


def test_unknown_precision():
    with pytest.raises(ValueError, match=r"Unknown precision 'fp8'\. Use one of '32-true', 'bf16-mixed', '16-mixed'"):
        Trainer(accelerator="cpu", precision="fp8", **QUIET)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_fp16_needs_cuda():
    with pytest.raises(ValueError, match="precision='16-mixed' needs a CUDA device"):
        Trainer(precision="16-mixed", accelerator="cpu", **QUIET)


def test_unknown_accelerator():
    with pytest.raises(ValueError, match=r"Unknown accelerator 'tpu'\. Use one of 'auto', 'cpu', 'cuda', 'gpu'"):
        Trainer(accelerator="tpu", **QUIET)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_cuda_accelerator_without_cuda():
    with pytest.raises(RuntimeError, match="CUDA is not available on this machine"):
        Trainer(accelerator="cuda", **QUIET)


def test_no_train_dataloader():
    with pytest.raises(ValueError, match=r"No training data: pass train_dataloaders to trainer.fit\(...\) or "
                       r"define Regression.train_dataloader\(\)"):
        Trainer(accelerator="cpu", **QUIET).fit(Regression())


def test_empty_dataloader():
    empty = DataLoader(TensorDataset(torch.zeros(0, 4), torch.zeros(0, 1)), batch_size=4)
    with pytest.raises(ValueError, match=r"The train dataloader is empty \(len 0\)"):
        _fit(Regression(), empty)


def test_empty_iterable_loader():
    class Empty(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(())

    with pytest.raises(ValueError, match="The train dataloader produced no batches this epoch"):
        _fit(Regression(), DataLoader(Empty(), batch_size=None))


def test_no_work_before_errors():
    """configure_optimizers is checked before training starts: no step has run."""
    module = NoOptim()
    before = module.w.detach().clone()
    with pytest.raises(NotImplementedError):
        _fit(module)
    assert torch.equal(module.w, before)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"max_epochs": -2}, ValueError, "max_epochs must be >= -1, got -2"),
        ({"max_steps": 1.5}, TypeError, "max_steps must be an int, got 1.5"),
        ({"log_every_n_steps": 0}, ValueError, "log_every_n_steps must be >= 1, got 0"),
        ({"gradient_clip_val": -1.0}, ValueError, "gradient_clip_val must be None or a number >= 0"),
        ({"gradient_clip_algorithm": "l2"}, ValueError, "gradient_clip_algorithm must be 'norm' or 'value'"),
        ({"val_check_interval": 1.5}, ValueError, r"val_check_interval as a fraction must be in \(0.0, 1.0\]"),
        ({"limit_train_batches": -1}, ValueError, "limit_train_batches must be >= 0, got -1"),
        ({"limit_val_batches": 2.0}, ValueError, r"limit_val_batches as a fraction must be in \[0.0, 1.0\]"),
        ({"scale_lr": "cubic"}, ValueError, "scale_lr must be False, True, 'linear' or 'sqrt'"),
        ({"devices": 0}, ValueError, "devices must be 'auto' or an int >= 1"),
        ({"num_nodes": 0}, ValueError, "num_nodes must be an int >= 1, got 0"),
        ({"strategy": "fsdp"}, ValueError, "Unknown strategy 'fsdp'"),
        ({"callbacks": [object()]}, TypeError, "callbacks must be Callback instances; got object"),
        ({"logger": "tb"}, TypeError, "logger must be True/False, a Logger or a list of Loggers; got str"),
        ({"deterministic": "yes"}, ValueError, "deterministic must be True, False or 'warn'"),
    ],
)
def test_bad_trainer_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        Trainer(accelerator="cpu", **{**QUIET, **kwargs})


def test_bad_configure_optimizers_return():
    class Bad(Regression):
        def configure_optimizers(self):
            return "sgd"

    with pytest.raises(TypeError, match="configure_optimizers\\(\\) must return an optimizer.*got str"):
        _fit(Bad())


def test_bad_scheduler_interval():
    class Bad(Regression):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.StepLR(opt, 1)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "batch"}}

    with pytest.raises(ValueError, match="lr_scheduler 'interval' must be 'step' or 'epoch', got 'batch'"):
        _fit(Bad())


def test_log_outside_trainer():
    with pytest.raises(RuntimeError, match=r"self.log\('x'\) was called outside a Trainer run"):
        Regression().log("x", 1.0)


def test_log_non_scalar():
    class Bad(Regression):
        def training_step(self, batch, batch_idx):
            self.log("vec", torch.ones(3))
            return super().training_step(batch, batch_idx)

    with pytest.raises(ValueError, match=r"self.log\('vec'\) needs a scalar, got a tensor of shape \(3,\)"):
        _fit(Bad())


def test_several_val_loaders_need_dataloader_idx():
    class OneArg(Regression):
        def validation_step(self, batch, batch_idx):
            return None

    data = loader(regression_data(8), 4)
    with pytest.raises(TypeError, match=r"validation_step is called with \(batch, batch_idx, dataloader_idx\) when "
                       r"there are several dataloaders \(2 here\); add a `dataloader_idx=0` parameter"):
        Trainer(accelerator="cpu", **QUIET).validate(OneArg(), [data, data])
