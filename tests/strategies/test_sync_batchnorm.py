"""SyncBatchNorm equals BatchNorm over the concatenated global batch (2 real gloo ranks)."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from tests.helpers.distributed import run_ranks
from trainer.strategies.sync_batchnorm import SyncBatchNorm, convert_sync_batchnorm

TOL = 1e-5
STEPS = 2

# (name, reference layer, per-sample shape after the batch dim, batch size of rank 0 and rank 1)
CASES = [
    ("bn1d-2d", lambda: nn.BatchNorm1d(3), (3,), (3, 5)),
    ("bn1d-3d-cumulative", lambda: nn.BatchNorm1d(3, momentum=None), (3, 4), (2, 2)),
    ("bn2d-no-affine", lambda: nn.BatchNorm2d(2, affine=False), (2, 3, 3), (4, 1)),
    ("bn3d-no-running-stats", lambda: nn.BatchNorm3d(2, track_running_stats=False), (2, 2, 2, 3), (1, 2)),
    ("bn1d-empty-rank", lambda: nn.BatchNorm1d(3, eps=1e-3), (3,), (0, 4)),
]


def _max_diff(a, b):
    return (a - b).abs().max().item() if a.numel() else 0.0


def _compare_with_global_batchnorm(rank, world_size):
    """Runs every case; returns {case: {quantity: max abs difference}} plus error messages."""
    report = {}
    for name, make, sample_shape, sizes in CASES:
        torch.manual_seed(0)  # every rank builds the same reference layer and global data
        reference = make()
        if reference.affine:
            nn.init.normal_(reference.weight)
            nn.init.normal_(reference.bias)
        synced = convert_sync_batchnorm(nn.Sequential(copy.deepcopy(reference)), use_torch_impl=False)
        assert isinstance(synced[0], SyncBatchNorm)
        if reference.affine:
            # DDP averages gradients over ranks. Each rank's loss is its share of the reference
            # loss (which is the SUM over ranks), so DDP's grad * world_size must equal the
            # reference grad. Buffers are not broadcast: each rank's own running stats are checked.
            synced = DistributedDataParallel(synced, broadcast_buffers=False)
        start, stop = sum(sizes[:rank]), sum(sizes[: rank + 1])
        diffs = {}
        for _ in range(STEPS):
            x_all = torch.randn(sum(sizes), *sample_shape, requires_grad=True)
            loss_weights = torch.randn(sum(sizes), *sample_shape)
            out_all = reference(x_all)
            (out_all * loss_weights).sum().backward()

            x = x_all.detach()[start:stop].clone().requires_grad_(True)
            out = synced(x)
            (out * loss_weights[start:stop]).sum().backward()

            diffs["output"] = max(diffs.get("output", 0.0), _max_diff(out, out_all[start:stop]))
            diffs["input_grad"] = max(
                diffs.get("input_grad", 0.0), _max_diff(x.grad, x_all.grad[start:stop])
            )
            for p_name, param in synced.named_parameters():
                ref_param = getattr(reference, p_name.rsplit(".", 1)[-1])
                diffs[f"{p_name}_grad"] = _max_diff(param.grad * world_size, ref_param.grad)
                param.grad = None
            reference.zero_grad()
        layer = synced.module[0] if isinstance(synced, DistributedDataParallel) else synced[0]
        if reference.track_running_stats:
            diffs["running_mean"] = _max_diff(layer.running_mean, reference.running_mean)
            diffs["running_var"] = _max_diff(layer.running_var, reference.running_var)
            diffs["num_batches_tracked"] = float(layer.num_batches_tracked != reference.num_batches_tracked)
        report[name] = diffs

    # Eval mode communicates nothing: only rank 0 runs it. A collective would fail once rank 1
    # has left the group.
    eval_diffs = {}
    if rank == 0:
        reference = nn.BatchNorm2d(2)
        reference.running_mean.uniform_()
        reference.running_var.uniform_(0.5, 2.0)
        layer = convert_sync_batchnorm(copy.deepcopy(reference), use_torch_impl=False).eval()
        x = torch.randn(3, 2, 4, 4)
        eval_diffs["eval_output"] = _max_diff(layer(x), reference.eval()(x))
    report["eval"] = eval_diffs

    # A single value per channel over all ranks cannot be normalised: every rank raises.
    layer = SyncBatchNorm(3)
    try:
        layer(torch.randn(rank, 3))  # rank 0: empty batch, rank 1: one sample
        message = None
    except ValueError as err:
        message = str(err)
    return report, message


@pytest.mark.distributed
@pytest.mark.timeout(90)
def test_matches_batchnorm_on_the_global_batch():
    results = run_ranks(_compare_with_global_batchnorm, timeout=80)
    for rank, (report, message) in enumerate(results):
        for case, diffs in report.items():
            bad = {k: v for k, v in diffs.items() if not v <= TOL}
            assert not bad, f"rank {rank}, case {case}: differences above {TOL}: {bad}"
        assert set(report["bn1d-2d"]) == {
            "output", "input_grad", "module.0.weight_grad", "module.0.bias_grad",
            "running_mean", "running_var", "num_batches_tracked",
        }
        assert message is not None and message.startswith(
            "SyncBatchNorm expects more than 1 value per channel when training, got 1 across all ranks"
        )
    assert "eval_output" in results[0][0]["eval"]


def test_without_process_group_behaves_like_batchnorm():
    torch.manual_seed(0)
    for momentum in (0.1, None):
        reference = nn.BatchNorm2d(3, momentum=momentum)
        layer = convert_sync_batchnorm(copy.deepcopy(reference), use_torch_impl=False)
        for _ in range(2):
            x = torch.randn(4, 3, 2, 2)
            torch.testing.assert_close(layer(x), reference(x))
        torch.testing.assert_close(layer.running_var, reference.running_var)
        assert layer.num_batches_tracked == reference.num_batches_tracked == 2
    layer.eval(), reference.eval()
    torch.testing.assert_close(layer(x), reference(x))


def test_bad_input():
    layer = SyncBatchNorm(3)
    with pytest.raises(ValueError, match=r"input of shape \(N, C, \.\.\.\), got 1D input of shape \(3,\)"):
        layer(torch.randn(3))
    with pytest.raises(ValueError, match=r"expects 3 channels in dimension 1, got input of shape \(2, 4\)"):
        layer(torch.randn(2, 4))
    with pytest.raises(TypeError, match="expects an nn.Module, got Tensor"):
        convert_sync_batchnorm(torch.ones(1), use_torch_impl=False)


def _model():
    model = nn.Sequential(
        nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2), nn.Sequential(nn.Flatten(), nn.BatchNorm1d(8))
    )
    model[1].weight.requires_grad_(False)
    model[2][1].eval()
    return model


def test_convert_keeps_parameters_buffers_and_flags():
    model = _model()
    bn2d, bn1d = model[1], model[2][1]
    converted = convert_sync_batchnorm(model, use_torch_impl=False)  # CPU module: ours
    new2d, new1d = converted[1], converted[2][1]
    assert type(new2d) is SyncBatchNorm and type(new1d) is SyncBatchNorm
    assert new2d.weight is bn2d.weight and not new2d.weight.requires_grad and new2d.bias.requires_grad
    assert new2d.running_mean is bn2d.running_mean and new1d.num_batches_tracked is bn1d.num_batches_tracked
    assert new2d.training and not new1d.training
    assert (new1d.num_features, new1d.eps, new1d.momentum) == (8, bn1d.eps, bn1d.momentum)
    assert type(convert_sync_batchnorm(_model())[1]) is SyncBatchNorm  # auto on CPU: ours
    # The root itself may be a BatchNorm: a new root comes back.
    assert type(convert_sync_batchnorm(nn.BatchNorm1d(2), use_torch_impl=False)) is SyncBatchNorm


def test_convert_with_torch_impl_delegates_to_torch():
    converted = convert_sync_batchnorm(_model(), use_torch_impl=True)
    assert type(converted[1]) is nn.SyncBatchNorm and type(converted[2][1]) is nn.SyncBatchNorm


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_module_gets_torch_implementation():
    converted = convert_sync_batchnorm(_model().cuda())
    assert type(converted[1]) is nn.SyncBatchNorm and converted[1].weight.is_cuda
