"""LARS (layer-wise adaptive rate scaling) and its clipped variant LARC."""
from __future__ import annotations

from typing import Any, Dict, List

import torch
from torch import Tensor

from trainer.contracts.arguments import check_bool, check_number
from trainer.optim.param_groups import (
    ExcludeSpec,
    ParamsT,
    _Bucket,
    _ExcludingOptimizer,
    exclude_1d,
)


class LARS(_ExcludingOptimizer):
    r"""Momentum SGD with a per-layer learning rate (You et al. 2017, "Large Batch Training of
    Convolutional Networks", arXiv:1708.03888).

    For every parameter tensor ("layer") :math:`w` with gradient :math:`g`, with
    :math:`\eta` = ``trust_coefficient``, :math:`\lambda` = ``weight_decay``,
    :math:`\mu` = ``momentum``, :math:`\gamma` = ``lr``:

    .. math::

        \text{local\_rate} &= \frac{\eta\,\|w\|}{\|g\| + \lambda\|w\| + \epsilon}
            \quad (\text{1 when } \|w\| = 0 \text{ or } \|g\| = 0) \\
        \gamma_\ell &= \gamma \cdot \text{local\_rate}
            \quad\text{(LARS, ``clip=False``)} \\
        \gamma_\ell &= \min(\text{local\_rate}, \gamma)
            \quad\text{(LARC, ``clip=True``; } \gamma \text{ when a norm is 0)} \\
        v &\leftarrow \mu v + \gamma_\ell\,(g + \lambda w) \\
        w &\leftarrow w - v

    ``clip=True`` is LARC, the variant in NVIDIA Apex: the trust ratio may only *lower* the
    step, so ``local_rate`` acts as an absolute per-layer learning rate capped by ``lr`` (use a
    larger ``trust_coefficient``, e.g. 0.02, in this mode). In both modes the momentum buffer
    :math:`v` holds steps that already include the learning rate, as in the paper's Algorithm 1.

    Excluded parameters (by default every tensor with ``ndim <= 1``, see
    :mod:`trainer.optim.param_groups`) get neither weight decay nor the trust ratio, i.e. plain
    momentum SGD: :math:`v \leftarrow \mu v + \gamma g`, :math:`w \leftarrow w - v`.

    Args:
        params: tensors, ``(name, tensor)`` pairs (``model.named_parameters()``) or param groups.
        lr: global learning rate :math:`\gamma` (>= 0).
        momentum: :math:`\mu` in [0, 1).
        weight_decay: :math:`\lambda` (>= 0), added to the gradient before the momentum.
        trust_coefficient: :math:`\eta` (> 0).
        eps: added to the denominator of the local rate (>= 0).
        exclude: which parameters skip weight decay and the trust ratio.
        clip: LARC mode, see above.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        trust_coefficient: float = 0.001,
        eps: float = 1e-8,
        exclude: ExcludeSpec = exclude_1d,
        clip: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr, momentum=momentum, weight_decay=weight_decay, trust_coefficient=trust_coefficient,
            eps=eps, clip=clip,
        )
        super().__init__(params, defaults, exclude)

    def _check_hyperparameters(self, group: Dict[str, Any]) -> None:
        check_number("lr", group["lr"], minimum=0)
        check_number("momentum", group["momentum"], minimum=0, below=1)
        check_number("weight_decay", group["weight_decay"], minimum=0)
        check_number("trust_coefficient", group["trust_coefficient"], above=0)
        check_number("eps", group["eps"], minimum=0)
        check_bool("clip", group["clip"])

    def _step_bucket(self, group: Dict[str, Any], bucket: _Bucket) -> None:
        lr = group["lr"]
        weight_decay = group["weight_decay"]
        bufs = []
        for p in bucket.params:
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            bufs.append(state["momentum_buffer"])

        torch._foreach_mul_(bufs, group["momentum"])
        if bucket.excluded:
            torch._foreach_add_(bufs, bucket.grads, alpha=lr)
        else:
            rates = self._layer_rates(group, bucket)
            # Out of place: the gradients themselves must stay untouched.
            if weight_decay != 0:
                update = torch._foreach_add(bucket.grads, bucket.params, alpha=weight_decay)
                torch._foreach_mul_(update, rates)
            else:
                update = torch._foreach_mul(bucket.grads, rates)
            torch._foreach_add_(bufs, update)
        torch._foreach_sub_(bucket.params, bufs)

    @staticmethod
    def _layer_rates(group: Dict[str, Any], bucket: _Bucket) -> List[Tensor]:
        """Per-layer learning rate gamma_l as 0-d tensors, computed on device without a host sync."""
        w_norm = torch.stack(torch._foreach_norm(bucket.params))
        g_norm = torch.stack(torch._foreach_norm(bucket.grads))
        lr = group["lr"]
        local = group["trust_coefficient"] * w_norm / (
            g_norm + group["weight_decay"] * w_norm + group["eps"]
        )
        # A zero norm makes the ratio 0 or undefined; either would freeze the layer, so use 1.
        defined = (w_norm > 0) & (g_norm > 0)
        if group["clip"]:
            rate = torch.where(defined, torch.clamp(local, max=lr), torch.full_like(local, lr))
        else:
            rate = torch.where(defined, local, torch.ones_like(local)) * lr
        return list(rate.unbind(0))
