"""Batch normalisation over the global batch of all ranks, on any device (CPU included).

``torch.nn.SyncBatchNorm`` refuses CPU modules. ``SyncBatchNorm`` here computes the statistics
with two all-reduces (sum and count, then the centred sum of squares) through an autograd-aware
all-reduce, so the forward pass, the backward pass and the running statistics equal a plain
``BatchNorm`` applied to the concatenation of every rank's micro batch, also when ranks hold
different batch sizes. ``convert_sync_batchnorm`` swaps it (or torch's CUDA kernel) into a model.
"""
from __future__ import annotations

import itertools
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

__all__ = ["SyncBatchNorm", "convert_sync_batchnorm"]


class _AllReduceSum(torch.autograd.Function):
    """Differentiable sum all-reduce.

    Every rank's loss depends on the reduced value, so the gradient of a rank's input is the sum
    of all ranks' output gradients: the backward pass is the same all-reduce. (Written here
    because ``torch.distributed.nn.functional.all_reduce`` is deprecated.)
    """

    @staticmethod
    def forward(ctx: Any, tensor: Tensor, group: Any) -> Tensor:
        ctx.group = group
        reduced = tensor.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(reduced, op=dist.ReduceOp.SUM, group=group)
        return reduced

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor) -> tuple[Tensor, None]:
        return _AllReduceSum.apply(grad_output, ctx.group), None


class SyncBatchNorm(_BatchNorm):
    """``BatchNorm`` whose training statistics cover the batches of all ranks of ``process_group``.

    Accepts inputs of shape ``(N, C)``, ``(N, C, L)``, ``(N, C, H, W)`` or ``(N, C, D, H, W)``.
    In training mode every rank must call forward (and backward) the same number of times: each
    call runs collectives. Running statistics are updated identically on every rank, so they stay
    in sync without a broadcast. Eval mode uses the running statistics and communicates nothing;
    with ``track_running_stats=False`` eval normalises with the local batch, as torch does,
    because evaluation loops may run a different number of batches per rank. Without an
    initialised process group (or with one rank) it behaves exactly like ``BatchNorm``.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group: Any = None,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype)
        self.process_group = process_group

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(
                f"SyncBatchNorm expects input of shape (N, C, ...), got {input.dim()}D input "
                f"of shape {tuple(input.shape)}; add a batch dimension."
            )

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        if input.shape[1] != self.num_features:
            raise ValueError(
                f"SyncBatchNorm expects {self.num_features} channels in dimension 1, got input of "
                f"shape {tuple(input.shape)}."
            )
        if not (self.training and self._group_size() > 1):
            return self._local_forward(input)

        factor = self._update_batch_count()
        group = self.process_group if self.process_group is not None else dist.group.WORLD
        # Half precision would lose the sums of large batches: accumulate in float32.
        x = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input
        reduce_dims = [0, *range(2, x.dim())]
        shape = [1, -1] + [1] * (x.dim() - 2)
        local_count = torch.full((1,), x.numel() // x.shape[1], dtype=x.dtype, device=x.device)

        # autograd.Function.apply is typed Any: _AllReduceSum returns the summed tensor
        sum_and_count: Tensor = _AllReduceSum.apply(torch.cat([x.sum(reduce_dims), local_count]), group)
        count = sum_and_count[-1].detach()
        if count.item() <= 1:
            raise ValueError(
                f"SyncBatchNorm expects more than 1 value per channel when training, got "
                f"{int(count.item())} across all ranks (input of shape {tuple(input.shape)} here)."
            )
        mean = sum_and_count[:-1] / count
        centred = x - mean.view(shape)
        # Second pass on centred values: no cancellation of E[x^2] - E[x]^2.
        var: Tensor = _AllReduceSum.apply((centred * centred).sum(reduce_dims), group) / count
        out = centred * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)

        if self.track_running_stats and self.running_mean is not None and self.running_var is not None:
            with torch.no_grad():
                unbiased = var.detach() * (count / (count - 1))
                self.running_mean.lerp_(mean.detach().to(self.running_mean.dtype), factor)
                self.running_var.lerp_(unbiased.to(self.running_var.dtype), factor)
        return out.to(input.dtype)

    def _group_size(self) -> int:
        if not (dist.is_available() and dist.is_initialized()):
            return 1
        return dist.get_world_size(self.process_group)

    def _update_batch_count(self) -> float:
        """Count this training batch; return the running-statistics factor, as ``_BatchNorm``."""
        if not self.track_running_stats or self.num_batches_tracked is None:
            return 0.0
        self.num_batches_tracked.add_(1)
        if self.momentum is None:  # cumulative moving average
            return 1.0 / float(self.num_batches_tracked)
        return float(self.momentum)

    def _local_forward(self, input: Tensor) -> Tensor:
        factor = self._update_batch_count() if self.training else 0.0
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        tracking = not self.training or self.track_running_stats
        return F.batch_norm(
            input,
            self.running_mean if tracking else None,
            self.running_var if tracking else None,
            self.weight,
            self.bias,
            use_batch_stats,
            factor,
            self.eps,
        )


def convert_sync_batchnorm(
    module: nn.Module,
    process_group: Any = None,
    *,
    use_torch_impl: bool | None = None,
) -> nn.Module:
    """Return ``module`` with every ``BatchNorm*`` layer replaced by a synchronised one.

    ``use_torch_impl=True`` delegates to ``torch.nn.SyncBatchNorm.convert_sync_batchnorm`` (CUDA
    kernels, CUDA modules only); ``False`` uses this module's ``SyncBatchNorm`` (any device);
    ``None`` picks torch's when the module's parameters or buffers are on CUDA. Layers are
    replaced in place and the root is returned (a new object if the root is a BatchNorm). Parameters and
    buffers are shared with the original layers (optimizers holding them stay valid), and
    ``requires_grad`` and the training flag are kept. Call it after moving the model to its
    device and before wrapping it in DDP.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"convert_sync_batchnorm expects an nn.Module, got {type(module).__name__}.")
    if use_torch_impl is None:
        use_torch_impl = any(t.is_cuda for t in itertools.chain(module.parameters(), module.buffers()))
    if use_torch_impl:
        converted: nn.Module = nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)  # typed Any in torch
        return converted
    return _convert(module, process_group)


def _convert(module: nn.Module, process_group: Any) -> nn.Module:
    if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
        converted = SyncBatchNorm(
            module.num_features,
            module.eps,
            module.momentum,
            module.affine,
            module.track_running_stats,
            process_group,
        )
        # Drop the freshly made tensors and share the originals.
        if module.affine:
            converted.weight = module.weight
            converted.bias = module.bias
        if module.track_running_stats:
            converted.running_mean = module.running_mean
            converted.running_var = module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
        converted.train(module.training)
        if hasattr(module, "qconfig"):
            converted.qconfig = module.qconfig
        return converted
    for name, child in module.named_children():
        new_child = _convert(child, process_group)
        if new_child is not child:
            setattr(module, name, new_child)
    return module
