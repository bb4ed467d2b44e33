"""Every bad input gets a clear error, before training work where it can be known then."""
from __future__ import annotations

import datetime
import inspect
import re
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from callbacks import (
    CSVLogger,
    EarlyStopping,
    GradientAccumulationScheduler,
    LearningRateMonitor,
    ModelCheckpoint,
    ModelSummary,
    ProgressBar,
    TensorBoardLogger,
    ThroughputMonitor,
    Timer,
)
from tests.helpers.models import QUIET, Regression, loader, regression_data
from trainer import AllReduceStrategy, DDPStrategy, Trainer, TrainModule


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


def test_step_returning_none_skips_the_batch_as_in_lightning():
    module = Returns("none")
    before = [p.detach().clone() for p in module.parameters()]
    with pytest.warns(UserWarning, match="training_step returned None: the batch is skipped"):
        _fit(module)
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters()))  # no step was taken


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
    with pytest.raises(ValueError, match=f"accumulate_grad_batches must be an int >= 1, got {value}"):
        Trainer(accelerator="cpu", accumulate_grad_batches=value, **QUIET)


def test_accumulate_grad_batches_not_int():
    with pytest.raises(TypeError, match="accumulate_grad_batches must be an int >= 1, got 2.0"):
        Trainer(accelerator="cpu", accumulate_grad_batches=2.0, **QUIET)


def test_unknown_precision():
    with pytest.raises(ValueError, match=r"Unknown precision 'fp8'\. Use one of '32-true', 'bf16-mixed', '16-mixed'"):
        Trainer(accelerator="cpu", precision="fp8", **QUIET)


def test_fp16_mixed_on_cpu_falls_back_to_bf16_mixed_as_lightning():
    with pytest.warns(UserWarning, match="AMP with fp16 is not supported on CPU. Using `precision='bf16-mixed'` instead"):
        assert Trainer(precision="16-mixed", accelerator="cpu", **QUIET).precision == "bf16-mixed"


def test_unknown_accelerator():
    with pytest.raises(ValueError, match=r"Unknown accelerator 'tpu'\. Use one of 'auto', 'cpu', 'cuda', 'gpu'"):
        Trainer(accelerator="tpu", **QUIET)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_cuda_accelerator_without_cuda():
    with pytest.raises(RuntimeError, match="CUDA is not available on this machine"):
        Trainer(accelerator="cuda", **QUIET)


def test_no_train_dataloader():
    with pytest.raises(ValueError, match=r"No training data: pass train_dataloaders or a datamodule to trainer.fit\(...\) or "
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
        ({"max_epochs": -2}, ValueError, "max_epochs must be an int >= -1, got -2"),
        ({"max_steps": 1.5}, TypeError, "max_steps must be an int >= -1, got 1.5"),
        ({"log_every_n_steps": 0}, ValueError, "log_every_n_steps must be an int >= 1, got 0"),
        ({"gradient_clip_val": -1.0}, ValueError, "gradient_clip_val must be None or a finite number >= 0"),
        ({"gradient_clip_algorithm": "l2"}, ValueError, "gradient_clip_algorithm must be 'norm' or 'value'"),
        ({"val_check_interval": 1.5}, ValueError, r"val_check_interval as a fraction must be in \(0.0, 1.0\]"),
        ({"limit_train_batches": -1}, ValueError, "limit_train_batches must be >= 0, got -1"),
        ({"limit_val_batches": 2.0}, ValueError, r"limit_val_batches as a fraction must be in \[0.0, 1.0\]"),
        ({"scale_lr": "cubic"}, ValueError, "scale_lr must be False, True, 'linear' or 'sqrt'"),
        ({"devices": 0}, ValueError, "devices must be 'auto' or an int >= 1"),
        ({"num_nodes": 0}, ValueError, "num_nodes must be an int >= 1, got 0"),
        ({"strategy": "deepspeed"}, ValueError, "Unknown strategy 'deepspeed'"),
        ({"callbacks": [object()]}, TypeError, "callbacks must be Callback instances; got object"),
        ({"logger": "tb"}, TypeError, "logger must be True/False, a Logger or a list of Loggers; got str"),
        ({"deterministic": "yes"}, ValueError, "deterministic must be True, False or 'warn'"),
    ],
)
def test_bad_trainer_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        Trainer(**{"accelerator": "cpu", **QUIET, **kwargs})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_epoch": 1}, "'max_epoch': did you mean `max_epochs`?"),
        ({"acelerator": "cpu"}, "'acelerator': did you mean `accelerator`?"),
        ({"gradient_clip": 1.0}, "'gradient_clip': did you mean `gradient_clip_val`?"),
        ({"qwertyuiop": 1}, "'qwertyuiop' (help(Trainer) lists the arguments)"),
    ],
)
def test_a_misspelled_trainer_argument_names_the_closest_one(kwargs, message):
    with pytest.raises(TypeError) as raised:
        Trainer(accelerator="cpu", **{**QUIET, **kwargs})
    assert str(raised.value) == "Trainer() got an unexpected keyword argument " + message


def test_ckpt_path_best_before_any_fit_says_to_pass_a_path():
    trainer = Trainer(accelerator="cpu", **{**QUIET, "enable_checkpointing": True})
    with pytest.raises(ValueError) as raised:
        trainer.validate(Regression(), loader(regression_data(8), 4), ckpt_path="best")
    message = str(raised.value)
    assert message.startswith("ckpt_path='best' is unknown: no fit has run in this process")
    assert "ckpt_path='path/to/file.ckpt'" in message and "\n" not in message


class _TrainerWithOptions(Trainer):
    """A subclass with arguments of its own, passing the rest on."""

    def __init__(self, *args, extra_flag: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.extra_flag = extra_flag


def test_a_trainer_subclass_keeps_its_own_arguments_and_gets_the_hint():
    trainer = _TrainerWithOptions(extra_flag=True, max_epochs=2, accelerator="cpu", **QUIET)
    assert trainer.extra_flag is True and trainer.max_epochs == 2
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_epoch': did you mean `max_epochs`"):
        _TrainerWithOptions(extra_flag=True, max_epoch=2, **QUIET)
    with pytest.raises(TypeError, match="unexpected keyword argument 'extra_flg': did you mean `extra_flag`"):
        _TrainerWithOptions(extra_flg=True, **QUIET)
    # the signature the CLI and the docs read is still the Trainer's own
    assert "max_epochs" in inspect.signature(Trainer).parameters
    assert "max_epochs" in inspect.signature(Trainer.__init__).parameters


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


# -- D11: every argument's type and range, also the ones a truthy value or NaN slipped through ----
_TRAINER_FLAGS = [
    "enable_progress_bar",
    "enable_checkpointing",
    "use_distributed_sampler",
    "detect_non_finite_loss",
    "detect_non_finite_grads",
    "sync_batchnorm",
    "compile",
    "channels_last",
    "pin_memory",
    "enable_model_summary",
]


@pytest.mark.parametrize("name", _TRAINER_FLAGS)
@pytest.mark.parametrize("value", ["no", 1, None])
def test_trainer_flags_must_be_bools(name, value):
    with pytest.raises(TypeError, match=rf"{name} must be a bool \(True or False\), got {value!r}"):
        Trainer(**{"accelerator": "cpu", **QUIET, name: value})


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            {"gradient_clip_val": float("nan")},
            ValueError,
            "gradient_clip_val must be None or a finite number >= 0, got nan",
        ),
        (
            {"gradient_clip_val": float("inf")},
            ValueError,
            "gradient_clip_val must be None or a finite number >= 0, got inf",
        ),
        (
            {"gradient_clip_val": "1"},
            TypeError,
            "gradient_clip_val must be None or a finite number >= 0, got '1'",
        ),
        (
            {"gradient_clip_val": True},
            TypeError,
            "gradient_clip_val must be None or a finite number >= 0, got True",
        ),
        ({"gradient_clip_algorithm": None}, TypeError, "gradient_clip_algorithm must be a str, got None"),
        (
            {"devices": 2.0},
            TypeError,
            r"devices must be 'auto' or an int >= 1 \(processes per node\), got 2.0",
        ),
        ({"devices": True}, TypeError, "devices must be 'auto' or an int >= 1"),
        ({"devices": "two"}, ValueError, "devices must be 'auto' or an int >= 1"),
        ({"num_nodes": 1.0}, TypeError, "num_nodes must be an int >= 1, got 1.0"),
        (
            {"precision": None},
            TypeError,
            "precision must be a str or an int, one of '32-true', 'bf16-mixed', '16-mixed', 'bf16-true', '16-true', "
            "'64-true'; got None",
        ),
        ({"precision": 32.0}, TypeError, "precision must be a str or an int"),
        ({"precision": True}, TypeError, "precision must be a str or an int"),
        (
            {"accelerator": None},
            TypeError,
            "accelerator must be a str, one of 'auto', 'cpu', 'cuda', 'gpu'; got None",
        ),
        ({"strategy": 2}, TypeError, "strategy must be a str or a Strategy instance, got 2"),
        ({"default_root_dir": 123}, TypeError, "default_root_dir must be None, a str or an os.PathLike path, got 123"),
        ({"default_root_dir": b"runs"}, TypeError, "default_root_dir must be None, a str or an os.PathLike path"),
        ({"scale_lr": 2}, TypeError, "scale_lr must be False, True, 'linear' or 'sqrt'; got 2"),
        ({"deterministic": 1}, TypeError, "deterministic must be True, False or 'warn', got 1"),
        (
            {"val_check_interval": float("nan")},
            ValueError,
            r"val_check_interval as a fraction must be in \(0.0, 1.0\]",
        ),
        (
            {"limit_val_batches": float("nan")},
            ValueError,
            r"limit_val_batches as a fraction must be in \[0.0, 1.0\]",
        ),
        ({"check_val_every_n_epoch": 2.0}, TypeError, "check_val_every_n_epoch must be an int >= 1, got 2.0"),
    ],
)
def test_bad_trainer_argument_types_and_values(kwargs, error, message):
    with pytest.raises(error, match=message):
        Trainer(**{"accelerator": "cpu", **QUIET, **kwargs})


def test_fit_weights_only_must_be_a_bool():
    with pytest.raises(TypeError, match=r"weights_only must be a bool \(True or False\), got 'no'"):
        Trainer(accelerator="cpu", max_epochs=1, **QUIET).fit(Regression(), loader(regression_data(8), 4), weights_only="no")


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"find_unused_parameters": "no"}, TypeError, "find_unused_parameters must be a bool"),
        ({"static_graph": 1}, TypeError, "static_graph must be a bool"),
        ({"gradient_as_bucket_view": None}, TypeError, "gradient_as_bucket_view must be a bool"),
        ({"broadcast_buffers": "False"}, TypeError, "broadcast_buffers must be a bool"),
        ({"bucket_cap_mb": float("nan")}, ValueError, "bucket_cap_mb must be a finite number >= 0, got nan"),
        ({"bucket_cap_mb": "25"}, TypeError, "bucket_cap_mb must be a finite number >= 0, got '25'"),
        (
            {"timeout": float("nan")},
            ValueError,
            "timeout must be a positive number of seconds or a timedelta, got nan",
        ),
        ({"timeout": float("inf")}, ValueError, "timeout must be a positive number of seconds"),
        ({"timeout": "30"}, TypeError, "timeout must be a positive number of seconds"),
        ({"timeout": datetime.timedelta(0)}, ValueError, "timeout must be a positive number of seconds"),
        ({"process_group_backend": 1}, TypeError, "process_group_backend must be None or a str, got 1"),
        ({"ddp_comm_hook": 1}, TypeError, "ddp_comm_hook must be one of"),
    ],
)
def test_bad_ddp_strategy_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        DDPStrategy(**kwargs)


def test_bad_allreduce_strategy_timeout():
    with pytest.raises(
        ValueError, match="timeout must be a positive number of seconds or a timedelta, got nan"
    ):
        AllReduceStrategy(timeout=float("nan"))


@pytest.mark.parametrize(
    "make, error, message",
    [
        (
            lambda: ModelCheckpoint(save_last="no"),
            TypeError,
            r"ModelCheckpoint\(save_last\) must be None, a bool or 'link', got 'no'",
        ),
        (lambda: ModelCheckpoint(verbose=1), TypeError, r"ModelCheckpoint\(verbose\) must be a bool \(True or False\), got 1"),
        (
            lambda: ModelCheckpoint(auto_insert_metric_name="no"),
            TypeError,
            r"\(auto_insert_metric_name\) must be a bool \(True or False\), got 'no'",
        ),
        (
            lambda: ModelCheckpoint(save_on_train_epoch_end="no"),
            TypeError,
            r"\(save_on_train_epoch_end\) must be None or a bool \(True or False\), got 'no'",
        ),
        (
            lambda: ModelCheckpoint(dirpath=123),
            TypeError,
            r"ModelCheckpoint\(dirpath\) must be None, a str or an os.PathLike",
        ),
        (
            lambda: ModelCheckpoint(monitor=1),
            TypeError,
            r"ModelCheckpoint\(monitor=1\): expected None or the name",
        ),
        (lambda: ModelCheckpoint(mode=None), TypeError, r"ModelCheckpoint\(mode=None\) is not supported"),
        (
            lambda: ModelCheckpoint(every_n_epochs=1.0),
            TypeError,
            r"ModelCheckpoint\(every_n_epochs\) must be None or an int >= 0, got 1.0",
        ),
        (
            lambda: EarlyStopping("x", check_finite="no"),
            TypeError,
            r"EarlyStopping\(check_finite\) must be a bool \(True or False\), got 'no'",
        ),
        (
            lambda: EarlyStopping("x", verbose="yes"),
            TypeError,
            r"EarlyStopping\(verbose\) must be a bool \(True or False\), got 'yes'",
        ),
        (
            lambda: EarlyStopping("x", stopping_threshold=float("nan")),
            ValueError,
            r"EarlyStopping\(stopping_threshold\) must be None or a finite number, got nan",
        ),
        (
            lambda: EarlyStopping("x", divergence_threshold="1"),
            TypeError,
            r"EarlyStopping\(divergence_threshold\) must be None or a finite number, got '1'",
        ),
        (
            lambda: EarlyStopping("x", min_delta=True),
            TypeError,
            r"EarlyStopping\(min_delta\) must be a finite number >= 0, got True",
        ),
        (lambda: EarlyStopping("x", min_delta=float("nan")), ValueError, r"EarlyStopping\(min_delta\) must be a finite number >= 0, got nan"),
        (
            lambda: EarlyStopping("x", patience=1.5),
            TypeError,
            r"EarlyStopping\(patience\) must be an int >= 0, got 1.5",
        ),
        (lambda: EarlyStopping(None), TypeError, r"EarlyStopping\(monitor=None\): expected the name"),
        (lambda: ProgressBar(leave="no"), TypeError, r"ProgressBar\(leave\) must be a bool \(True or False\), got 'no'"),
        (
            lambda: ProgressBar(refresh_rate=True),
            TypeError,
            r"ProgressBar\(refresh_rate\) must be an int >= 0, got True",
        ),
        (lambda: ProgressBar(min_interval_s="0.2"), TypeError, r"ProgressBar\(min_interval_s\) must be a finite number >= 0, got '0.2'"),
        (lambda: ProgressBar(min_interval_s=float("inf")), ValueError, r"ProgressBar\(min_interval_s\) must be a finite number >= 0, got inf"),
        (
            lambda: ProgressBar(line_every_percent=float("nan")),
            ValueError,
            r"ProgressBar\(line_every_percent\) must be a finite number in \(0, 100\], got nan",
        ),
        (
            lambda: ProgressBar(file="out.txt"),
            TypeError,
            r"ProgressBar\(file='out.txt'\): expected None or a text stream",
        ),
        (
            lambda: LearningRateMonitor(logging_interval=1),
            TypeError,
            r"LearningRateMonitor\(logging_interval=1\)",
        ),
        (
            lambda: ThroughputMonitor(log_every_n_steps=2.0),
            TypeError,
            r"ThroughputMonitor\(log_every_n_steps\) must be None or an int >= 1, got 2.0",
        ),
        (
            lambda: GradientAccumulationScheduler({0: 2.0}),
            TypeError,
            "accumulation values must be ints >= 1, got 2.0",
        ),
        (
            lambda: CSVLogger(save_dir=123),
            TypeError,
            r"CSVLogger\(save_dir\) must be None, a str or an os.PathLike",
        ),
        (lambda: CSVLogger(name=1), TypeError, r"CSVLogger\(name=1\): expected None or a str"),
        (
            lambda: CSVLogger(flush_logs_every_n_steps=1.0),
            TypeError,
            r"CSVLogger\(flush_logs_every_n_steps\) must be an int >= 1, got 1.0",
        ),
        (lambda: TensorBoardLogger(save_dir=123), TypeError, r"TensorBoardLogger\(save_dir\) must be None, a str or an os.PathLike path, got 123"),
    ],
)
def test_bad_callback_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


# -- D15 --------------------------------------------------------------------------------------
class StrLoss(Regression):
    def training_step(self, batch, batch_idx):
        super().training_step(batch, batch_idx)
        return {"loss": "0.5"}


def test_step_returning_dict_with_non_tensor_loss():
    with pytest.raises(
        TypeError, match="at batch index 0 it returned a dict whose 'loss' is a str, not a tensor"
    ):
        _fit(StrLoss())


class Frozen(Regression):
    def __init__(self):
        super().__init__()
        self.net.requires_grad_(False)
        self.steps = 0

    def training_step(self, batch, batch_idx):
        self.steps += 1
        return super().training_step(batch, batch_idx)


def test_all_frozen_model_is_refused_before_training():
    module = Frozen()
    with pytest.raises(
        ValueError,
        match=r"No parameter of Frozen requires grad \(all 4 of its parameters have "
        r"requires_grad=False\): there is nothing to train",
    ):
        _fit(module)
    assert module.steps == 0


class CountsValidation(Regression):
    def __init__(self):
        super().__init__()
        self.train_steps = 0
        self.val_steps = 0

    def training_step(self, batch, batch_idx):
        self.train_steps += 1
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.val_steps += 1
        return super().validation_step(batch, batch_idx)


@pytest.mark.parametrize("limit_train_batches, interval, batches", [(None, 5, 4), (2, 3, 2)])
def test_val_check_interval_longer_than_the_epoch(limit_train_batches, interval, batches):
    module = CountsValidation()
    data = loader(regression_data(16), 4)  # 4 batches
    with pytest.raises(
        ValueError,
        match=f"val_check_interval={interval} is more than the {batches} training " "batches of an epoch",
    ):
        Trainer(accelerator="cpu",
            max_epochs=1,
            val_check_interval=interval,
            limit_train_batches=limit_train_batches,
            num_sanity_val_steps=0,
            **QUIET,
        ).fit(module, data, data)
    assert module.train_steps == 0


def test_val_check_interval_equal_to_the_epoch_validates():
    module = CountsValidation()
    data = loader(regression_data(16), 4)
    Trainer(accelerator="cpu", max_epochs=2, val_check_interval=4, num_sanity_val_steps=0, **QUIET).fit(module, data, data)
    assert (module.train_steps, module.val_steps) == (8, 8)


def test_val_check_interval_without_val_data_is_fine():
    assert _fit(Regression(), val_check_interval=100).global_step == 4


def test_limit_val_batches_fraction_rounding_to_zero():
    module = CountsValidation()
    data = loader(regression_data(16), 4)  # 4 batches: 0.1 * 4 = 0.4 batches
    with pytest.raises(
        ValueError,
        match=r"limit_val_batches=0.1 of the 4 batches of the val dataloader rounds "
        r"down to 0 batches. Use at least 1/4, or an int number of batches",
    ):
        Trainer(accelerator="cpu", max_epochs=1, limit_val_batches=0.1, num_sanity_val_steps=0, **QUIET).fit(module, data, data)
    assert module.train_steps == 0


def test_limit_train_batches_fraction_rounding_to_zero():
    with pytest.raises(ValueError, match="limit_train_batches=0.2 of the 4 batches of the train dataloader rounds"):
        _fit(Regression(), limit_train_batches=0.2)


def test_limit_test_batches_fraction_rounding_to_zero():
    with pytest.raises(
        ValueError, match="limit_test_batches=0.2 of the 4 batches of the test dataloader rounds"
    ):
        Trainer(accelerator="cpu", limit_test_batches=0.2, **QUIET).test(Regression(), loader(regression_data(16), 4))


def test_limit_val_batches_zero_still_turns_validation_off():
    module = CountsValidation()
    data = loader(regression_data(16), 4)
    Trainer(accelerator="cpu", max_epochs=1, limit_val_batches=0.0, **QUIET).fit(module, data, data)
    assert (module.train_steps, module.val_steps) == (4, 0)


class PlateauOn(Regression):
    def __init__(self, monitor="val_loss", strict=None):
        super().__init__()
        self.monitor_name = monitor
        self.strict = strict

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        self.plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
        config = {"scheduler": self.plateau, "monitor": self.monitor_name}
        if self.strict is not None:
            config["strict"] = self.strict
        return {"optimizer": opt, "lr_scheduler": config}


def test_plateau_scheduler_steps_only_on_validation_epochs():
    """check_val_every_n_epoch=2: val_loss exists from epoch 2 on; step on each new value only."""
    module = PlateauOn()
    data = loader(regression_data(16), 4)
    Trainer(accelerator="cpu", max_epochs=5, check_val_every_n_epoch=2, num_sanity_val_steps=0, **QUIET).fit(module, data, data)
    assert module.plateau.last_epoch == 2  # after epochs 2 and 4, not on the stale values of 3 and 5


def test_plateau_scheduler_missing_monitor_is_a_clear_error():
    data = loader(regression_data(16), 4)
    trainer = Trainer(accelerator="cpu", max_epochs=3, check_val_every_n_epoch=2, num_sanity_val_steps=0, **QUIET)
    with pytest.raises(
        ValueError,
        match=r"ReduceLROnPlateau monitors 'val_acc', which was not logged .*"
        r"Logged metrics: \['train_loss', 'val_loss'\]\. .*'strict': False",
    ):
        trainer.fit(PlateauOn("val_acc"), data, data)
    assert trainer.current_epoch == 1  # at the end of epoch 2, the first with a validation run


def test_plateau_scheduler_without_validation_data():
    with pytest.raises(ValueError, match="ReduceLROnPlateau monitors 'val_loss', which was not logged"):
        _fit(PlateauOn())


def test_plateau_scheduler_not_strict_warns_and_skips():
    module = PlateauOn("val_acc", strict=False)
    data = loader(regression_data(16), 4)
    with pytest.warns(
        UserWarning, match=r"monitors 'val_acc', which was not logged.*does not step \('strict': False\)"
    ):
        Trainer(accelerator="cpu", max_epochs=2, num_sanity_val_steps=0, **QUIET).fit(module, data, data)
    assert module.plateau.last_epoch == 0


def test_scheduler_strict_must_be_a_bool():
    with pytest.raises(TypeError, match="lr_scheduler 'strict' must be a bool, got 'no'"):
        _fit(PlateauOn(strict="no"))


# -- F: docs/trainer.md describes every argument ------------------------------------------------
def test_trainer_doc_lists_every_argument():
    lines = (Path(__file__).parents[2] / "docs" / "trainer.md").read_text(encoding="utf-8").splitlines()
    # the first cell of every table row names its arguments: | `limit_test_batches`, `limit_predict_batches` |
    documented = {
        name
        for line in lines
        if line.startswith("| `")
        for name in re.findall(r"`(\w+)`", line.split("|")[1])
    }
    arguments = [name for name in inspect.signature(Trainer.__init__).parameters if name != "self"]
    assert [name for name in arguments if name not in documented] == []
    signature = next(line for line in lines if line.startswith("trainer.fit(") and "->" in line)
    fit_arguments = [name for name in inspect.signature(Trainer.fit).parameters if name != "self"]
    assert [name for name in fit_arguments if f"{name}" not in signature] == []


@pytest.mark.parametrize(
    "call, error, message",
    [
        (
            lambda t, m, d: t.fit(m, 123),
            TypeError,
            r"fit\(train_dataloaders=...\) must be a DataLoader or an iterable of batches, got int",
        ),
        (
            lambda t, m, d: t.fit(m, d, 5),
            TypeError,
            r"fit\(val_dataloaders=...\) must be a DataLoader or an iterable of batches, got int",
        ),
        (
            lambda t, m, d: t.fit(m, d, [d, "val"]),
            TypeError,
            r"fit\(val_dataloaders=...\) must be a DataLoader .*got str",
        ),
        (
            lambda t, m, d: t.fit(m, d, ckpt_path=123),
            TypeError,
            "ckpt_path must be None, a str or an os.PathLike path, got 123",
        ),
        (
            lambda t, m, d: t.validate(m, 7),
            TypeError,
            r"trainer.validate\(dataloaders=...\) must be a DataLoader .*got int",
        ),
        (
            lambda t, m, d: t.test(m, d, ckpt_path=1.5),
            TypeError,
            "ckpt_path must be None, a str or an os.PathLike path, got 1.5",
        ),
    ],
)
def test_bad_entry_point_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call(Trainer(accelerator="cpu", max_epochs=1, **QUIET), Regression(), loader(regression_data(8), 4))


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"fast_dev_run": "yes"}, TypeError, "fast_dev_run must be a bool or an int number of batches, got 'yes'"),
        ({"fast_dev_run": 1.0}, TypeError, "fast_dev_run must be a bool or an int number of batches, got 1.0"),
        ({"fast_dev_run": -1}, ValueError, r"fast_dev_run must be >= 0 \(or a bool\), got -1"),
        ({"overfit_batches": None}, TypeError, "overfit_batches must be an int"),
        ({"overfit_batches": "2"}, TypeError, "overfit_batches must be an int"),
        ({"overfit_batches": 1.5}, ValueError, r"overfit_batches as a fraction must be in \[0.0, 1.0\], got 1.5"),
        ({"overfit_batches": -2}, ValueError, "overfit_batches must be >= 0, got -2"),
        ({"max_time": "1:2"}, ValueError, "max_time as a string must be 'DD:HH:MM:SS'"),
        ({"max_time": 60}, TypeError, "max_time must be None, a 'DD:HH:MM:SS' string, a dict"),
        ({"max_time": {"hour": 1}}, ValueError, r"max_time as a dict takes the keys .*got unknown \['hour'\]"),
        ({"max_time": {"hours": "1"}}, TypeError, r"max_time\['hours'\] must be a number, got '1'"),
        ({"max_time": datetime.timedelta(seconds=-1)}, ValueError, "max_time must not be negative"),
        ({"reload_dataloaders_every_n_epochs": 1.0}, TypeError, "reload_dataloaders_every_n_epochs must be an int >= 0, got 1.0"),
        ({"reload_dataloaders_every_n_epochs": -1}, ValueError, "reload_dataloaders_every_n_epochs must be an int >= 0, got -1"),
        ({"profiler": "cprofile"}, ValueError, "profiler must be None, 'simple', 'advanced', 'pytorch' or a Profiler, got 'cprofile'"),
        ({"profiler": True}, TypeError, "profiler must be None, 'simple', 'advanced', 'pytorch' or a Profiler, got True"),
    ],
)
def test_bad_convenience_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        Trainer(**{"accelerator": "cpu", **QUIET, **kwargs})


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: Timer(interval="batch"), ValueError, "Timer interval must be 'step' or 'epoch', got 'batch'"),
        (lambda: Timer(duration=5), TypeError, "duration must be None, a 'DD:HH:MM:SS' string"),
        (lambda: Timer(verbose="no"), TypeError, "Timer verbose must be a bool, got 'no'"),
        (lambda: ModelSummary(max_depth=1.0), TypeError, "ModelSummary max_depth must be an int, got 1.0"),
        (lambda: ModelSummary(max_depth=-2), ValueError, "ModelSummary max_depth must be >= -1, got -2"),
    ],
)
def test_bad_timer_and_model_summary_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()
