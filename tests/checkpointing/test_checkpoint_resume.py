"""Checkpoints hold everything; resuming mid-epoch is bitwise equal to never stopping."""
from __future__ import annotations

import os
import pickle

import pytest
import torch

from callbacks import Callback
from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET, Regression, loader, regression_data
from tests.helpers.resume_models import straight_and_resumed
from trainer import Trainer
from trainer.checkpoint_io.file_format import CheckpointError


# 96 samples / batch 4 = 24 batches, A=2 -> 12 steps per epoch, 24 in the straight run.
POSITIONS = {
    "mid-epoch": ("crash", 18),  # a checkpoint written 1.5 epochs in, then a crash
    "epoch-boundary": ("crash", 12),  # written after the epoch's last batch, before its end hooks
    "after-fit": ("max_steps", 12),  # a fit that ended with its epoch, then save_checkpoint()
    "after-max_steps": ("max_steps", 18),  # a fit that max_steps stopped mid-epoch, then save_checkpoint()
}


@pytest.mark.parametrize("own_generator", [False, True], ids=["global-rng", "own-generator"])
@pytest.mark.parametrize("position", list(POSITIONS))
def test_resume_is_bitwise_single_process(tmp_path, position, own_generator):
    stop, stop_step = POSITIONS[position]
    straight, resumed, steps = straight_and_resumed(str(tmp_path), stop_step, own_generator, stop=stop)
    assert steps == 24
    for a, b in zip(straight, resumed):
        assert torch.equal(a, b)


@pytest.mark.parametrize("position", ["mid-epoch", "after-max_steps"])
def test_resume_with_a_sampler_of_the_users_own_is_bitwise(tmp_path, position):
    """A sampler of the user's own is not rebuilt into the Trainer's GlobalBatchSampler, so the
    resumed epoch skips its trained batches at the batch-sampler level instead."""
    stop, stop_step = POSITIONS[position]
    straight, resumed, steps = straight_and_resumed(str(tmp_path), stop_step, stop=stop, own_sampler=True)
    assert steps == 24
    for a, b in zip(straight, resumed):
        assert torch.equal(a, b)


def _two_rank_resume(rank, world_size, tmp):
    torch.set_num_threads(1)
    outcomes = []
    for position, (stop, stop_step) in POSITIONS.items():
        for own_generator in (False, True):
            # 12 batches/rank, 6 steps/epoch: the same positions at half the steps
            straight, resumed, steps = straight_and_resumed(
                tmp, stop_step // 2, own_generator, stop=stop, accelerator="cpu"
            )
            outcomes.append((position, own_generator, steps, all(torch.equal(a, b) for a, b in zip(straight, resumed))))
    return outcomes


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_resume_is_bitwise_two_ranks(tmp_path):
    results = run_ranks(_two_rank_resume, world_size=2, args=(str(tmp_path),), init_group=False, timeout=270)
    expected = [(position, own, 12, True) for position in POSITIONS for own in (False, True)]
    assert results == [expected, expected]


def test_resume_never_maps_the_checkpoint_to_the_run_device(tmp_path, monkeypatch):
    # On a GPU the checkpoint was loaded to the training device, so RNG states arrived as CUDA
    # tensors and torch.set_rng_state raised. Loading must not depend on the run's device:
    # restoring here with the strategy reporting a CUDA device must still resume exactly (on a
    # CPU-only machine torch refuses to map anything to CUDA, so any use of the device fails).
    import trainer.loops.fit_setup as set_up_module  # the fit's set-up reads the checkpoint and restores it
    from trainer.strategies.strategy import Strategy

    def as_on_a_gpu(fn):
        def call(*args, **kwargs):
            with monkeypatch.context() as m:
                m.setattr(Strategy, "root_device", property(lambda _: torch.device("cuda", 0)))
                return fn(*args, **kwargs)

        return call

    for name in ("read_checkpoint", "restore_checkpoint"):  # reading the file, then restoring from it
        monkeypatch.setattr(set_up_module, name, as_on_a_gpu(getattr(set_up_module, name)))
    straight, resumed, _ = straight_and_resumed(str(tmp_path), 18, own_generator=True, accelerator="cpu")
    assert all(torch.equal(a, b) for a, b in zip(straight, resumed))


def _rng_tensors_as_int64(value):
    if isinstance(value, torch.Tensor):
        return value.to(torch.int64)  # no longer a ByteTensor: set_rng_state refuses it as is
    if isinstance(value, dict):
        return {k: _rng_tensors_as_int64(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_rng_tensors_as_int64(v) for v in value)
    return value


@pytest.mark.parametrize("position", ["mid-epoch", "after-fit"])
def test_rng_states_are_restored_from_cpu_bytes_whatever_tensors_were_loaded(tmp_path, monkeypatch, position):
    import trainer.checkpoint_io.file_format as checkpoint_module

    load = checkpoint_module.load_checkpoint

    def load_with_foreign_rng_tensors(*args, **kwargs):
        ckpt = load(*args, **kwargs)
        ckpt["rank_states"] = _rng_tensors_as_int64(ckpt["rank_states"])
        return ckpt

    import trainer.checkpoint_io.sharded_read as reading_module  # where a file is read

    monkeypatch.setattr(reading_module, "load_checkpoint", load_with_foreign_rng_tensors)
    stop, stop_step = POSITIONS[position]
    straight, resumed, _ = straight_and_resumed(str(tmp_path), stop_step, own_generator=True, stop=stop, accelerator="cpu")
    assert all(torch.equal(a, b) for a, b in zip(straight, resumed))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("position", list(POSITIONS))
def test_cuda_resume_is_bitwise(tmp_path, position):
    stop, stop_step = POSITIONS[position]
    straight, resumed, steps = straight_and_resumed(str(tmp_path), stop_step, True, stop=stop, accelerator="cuda")
    assert steps == 24
    assert all(a.is_cuda and torch.equal(a, b) for a, b in zip(straight, resumed))


def test_checkpoint_contents(tmp_path):
    from tests.helpers.resume_models import Noisy, make_loader

    t = Trainer(accelerator="cpu", max_epochs=1, accumulate_grad_batches=2, **QUIET)
    t.fit(Noisy(), make_loader())
    t.save_checkpoint(tmp_path / "c.ckpt")
    ckpt = torch.load(tmp_path / "c.ckpt", weights_only=True)
    assert ckpt["format_version"] == 2
    assert {"state_dict", "optimizer_states", "lr_schedulers", "precision", "epoch", "global_step", "loops",
            "rank_states", "callbacks", "hyper_parameters", "world_size", "accumulate_grad_batches"} <= set(ckpt)
    assert ckpt["global_step"] == 12 and ckpt["world_size"] == 1 and ckpt["accumulate_grad_batches"] == 2
    (rank0,) = ckpt["rank_states"]
    assert {"python", "torch", "numpy"} <= set(rank0["rng"])
    assert rank0["epoch_state"]["rng"]["torch"].dtype == torch.uint8


class _Exploit:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_and_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    exploit = _Exploit()
    exploit.marker = marker
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "payload": exploit}, path)
    assert not marker.exists()
    with pytest.raises(CheckpointError, match=r"Refused to load .*evil.ckpt.*not safe to unpickle.*weights_only=False"):
        Trainer(accelerator="cpu", max_epochs=1, **QUIET).fit(Regression(), loader(regression_data(8), 4), ckpt_path=path)
    assert not marker.exists()


def test_trusted_checkpoint_with_custom_objects_loads_with_opt_in(tmp_path):
    t = Trainer(accelerator="cpu", max_epochs=1, **QUIET)
    module = Regression()
    t.fit(module, loader(regression_data(8), 4))
    t.save_checkpoint(tmp_path / "c.ckpt")
    ckpt = torch.load(tmp_path / "c.ckpt", weights_only=True)
    ckpt["extra"] = pickle.loads(pickle.dumps(range(3)))  # a `range` is not a weights-only type
    torch.save(ckpt, tmp_path / "custom.ckpt")
    with pytest.raises(CheckpointError, match="Refused to load"):
        Trainer(accelerator="cpu", max_epochs=2, **QUIET).fit(Regression(), loader(regression_data(8), 4), ckpt_path=tmp_path / "custom.ckpt")
    t2 = Trainer(accelerator="cpu", max_epochs=2, **QUIET)
    t2.fit(Regression(), loader(regression_data(8), 4), ckpt_path=tmp_path / "custom.ckpt", weights_only=False)
    assert t2.global_step == 4


def test_truncated_checkpoint_names_the_file_and_loads_nothing(tmp_path):
    t = Trainer(accelerator="cpu", max_epochs=1, **QUIET)
    t.fit(Regression(), loader(regression_data(8), 4))
    t.save_checkpoint(tmp_path / "good.ckpt")
    data = (tmp_path / "good.ckpt").read_bytes()
    (tmp_path / "cut.ckpt").write_bytes(data[: len(data) // 2])
    module = Regression(seed=3)
    before = [p.detach().clone() for p in module.parameters()]
    with pytest.raises(CheckpointError, match=r"Could not load checkpoint .*cut.ckpt.*truncated or corrupt"):
        Trainer(accelerator="cpu", max_epochs=2, **QUIET).fit(module, loader(regression_data(8), 4), ckpt_path=tmp_path / "cut.ckpt")
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters()))


def test_checkpoint_of_another_model_loads_nothing(tmp_path):
    t = Trainer(accelerator="cpu", max_epochs=1, **QUIET)
    t.fit(Regression(features=4), loader(regression_data(8), 4))
    t.save_checkpoint(tmp_path / "c.ckpt")
    other = Regression(features=3)
    before = [p.detach().clone() for p in other.parameters()]
    with pytest.raises(CheckpointError, match=r"does not fit this run: 'net.0.weight' has shape \(8, 4\), the module \(8, 3\).*Nothing was loaded"):
        Trainer(accelerator="cpu", max_epochs=2, **QUIET).fit(other, loader(regression_data(8, features=3), 4), ckpt_path=tmp_path / "c.ckpt")
    assert all(torch.equal(a, b) for a, b in zip(before, other.parameters()))


def test_missing_checkpoint_and_last_without_any(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        Trainer(accelerator="cpu", max_epochs=1, **QUIET).fit(Regression(), loader(regression_data(8), 4), ckpt_path=tmp_path / "nope.ckpt")
    with pytest.raises(ValueError, match="ckpt_path='last' but there is no last checkpoint"):
        Trainer(accelerator="cpu", max_epochs=1, default_root_dir=tmp_path, **QUIET).fit(
            Regression(), loader(regression_data(8), 4), ckpt_path="last"
        )


def test_non_finite_gradient_check_names_the_parameter():
    from trainer.loops.anomaly import NonFiniteGradientError

    class BadGrad(Regression):
        def on_after_backward(self):
            if self.global_step == 2:
                self.net[2].bias.grad.fill_(float("inf"))

    t = Trainer(accelerator="cpu", max_epochs=1, detect_non_finite_grads=True, **QUIET)
    with pytest.raises(NonFiniteGradientError, match=r"parameter 'net.2.bias' on rank 0 at epoch 0, global step 2, "
                       r"after the accumulation window ending at batch index 2"):
        t.fit(BadGrad(), loader(regression_data(32), 4))


def _scaled_run_and_resume(rank, world_size, tmp):
    torch.set_num_threads(1)
    kw = dict(scale_lr=True, **QUIET)
    t = Trainer(accelerator="cpu", max_epochs=1, **kw)
    t.fit(Regression(optimizer="sgd", lr=0.05), loader(regression_data(32), 4))
    t.save_checkpoint(f"{tmp}/w2.ckpt")
    lr_after_fit = t.optimizers[0].param_groups[0]["lr"]
    resumed = Trainer(accelerator="cpu", max_epochs=2, **kw)
    resumed.fit(Regression(optimizer="sgd", lr=0.05), loader(regression_data(32), 4), ckpt_path=f"{tmp}/w2.ckpt")
    resumed.save_checkpoint(f"{tmp}/again.ckpt")  # the record survives a resume: a third fit reads it too
    records = None
    if rank == 0:  # the writer: no other rank waits for the file
        records = [torch.load(f"{tmp}/{name}.ckpt", weights_only=False)["lr_scaled"] for name in ("w2", "again")]
    return lr_after_fit, resumed.optimizers[0].param_groups[0]["lr"], records


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_lr_scaling_is_not_applied_twice_and_world_size_may_change(tmp_path):
    results = run_ranks(_scaled_run_and_resume, world_size=2, args=(str(tmp_path),), init_group=False, timeout=100)
    assert results == [(0.1, 0.1, [True, True]), (0.1, 0.1, None)]  # scaled once for W=2, not again on resume
    t = Trainer(accelerator="cpu", max_epochs=2, scale_lr=True, allow_global_batch_change=True, **QUIET)
    with pytest.warns(UserWarning, match=r"Resuming a checkpoint made with world size 2 on world size 1: the "
                      r"module, optimizer and scheduler states are restored \(the learning rates as saved, not "
                      r"scaled again\), the data order continues exactly"):
        t.fit(Regression(optimizer="sgd", lr=0.05), loader(regression_data(32), 4), ckpt_path=tmp_path / "w2.ckpt")
    assert t.optimizers[0].param_groups[0]["lr"] == 0.1
    assert t.global_step == 8 + 4  # epoch 0 came from the checkpoint (4 steps at W=2), epoch 1 here (8 steps)


class _CountEpochBatches(Callback):
    def __init__(self):
        self.batches = {}

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.batches[trainer.current_epoch] = self.batches.get(trainer.current_epoch, 0) + 1


def _regression_loader(n):
    from tests.helpers.models import loader, regression_data

    return loader(regression_data(n), 8, shuffle=True)


@pytest.mark.parametrize("length", [100, 40])
def test_a_resume_mid_epoch_over_another_dataset_length_is_refused_naming_both(tmp_path, length):
    """Stopped at 48 of 96 samples: grown to 100 (24 trained twice, 22 unseen) or shrunk to 40 is
    refused before any step, naming both lengths and the checkpoint; opted in, the epoch restarts."""
    from tests.helpers.models import Regression
    from trainer.checkpointing.resume import DatasetChangedError

    path = str(tmp_path / "mid.ckpt")
    first = Trainer(accelerator="cpu", max_steps=6, **QUIET)
    first.fit(Regression(), _regression_loader(96))
    first.save_checkpoint(path)
    assert torch.load(path, weights_only=True)["loops"]["fit_loop"]["dataset_size"] == 96
    model = Regression()
    counted = _CountEpochBatches()
    with pytest.raises(DatasetChangedError, match=rf"'.*mid.ckpt' was written in the middle of an epoch over a train dataset of 96 samples; this run's train dataset has {length}\..*allow_dataset_change=True.*No step was taken"):
        Trainer(accelerator="cpu", max_epochs=1, callbacks=[counted], **QUIET).fit(model, _regression_loader(length), ckpt_path=path)
    assert counted.batches == {} and model.trainer.global_step == 6  # not one step further
    counted = _CountEpochBatches()
    with pytest.warns(UserWarning, match=rf"96 samples; this run's train dataset has {length}\. allow_dataset_change=True: the interrupted epoch restarts"):
        Trainer(accelerator="cpu", max_epochs=1, allow_dataset_change=True, callbacks=[counted], **QUIET).fit(
            Regression(), _regression_loader(length), ckpt_path=path
        )
    assert counted.batches == {0: -(-length // 8)}  # the whole epoch over the new dataset
