"""LAMB: Adam with a layer-wise trust ratio."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Tuple, Union

import torch
from torch import Tensor

from trainer.optim.param_groups import (
    ExcludeSpec,
    ParamsT,
    _adam_moments,
    _Bucket,
    _check_adam_hyperparameters,
    _ExcludingOptimizer,
    exclude_1d,
)


class LAMB(_ExcludingOptimizer):
    r"""Layer-wise Adaptive Moments for Batch training (You et al. 2019, "Large Batch
    Optimization for Deep Learning: Training BERT in 76 minutes", arXiv:1904.00962).

    For every parameter tensor ("layer") :math:`w` with gradient :math:`g` at its step
    :math:`t` (1-based, counted per parameter), with :math:`\lambda` = ``weight_decay``:

    .. math::

        m &\leftarrow \beta_1 m + (1 - \beta_1) g, \qquad
        v \leftarrow \beta_2 v + (1 - \beta_2) g^2 \\
        \hat m &= m / (1 - \beta_1^t), \qquad \hat v = v / (1 - \beta_2^t) \\
        r &= \hat m / (\sqrt{\hat v} + \epsilon), \qquad u = r + \lambda w \\
        \text{ratio} &= \|w\| / \|u\| \quad (\text{1 when } \|w\| = 0 \text{ or } \|u\| = 0) \\
        w &\leftarrow w - \text{lr} \cdot \text{ratio} \cdot u

    The ratio is used as is (the paper's scaling function :math:`\phi` is the identity here).
    Excluded parameters (by default every tensor with ``ndim <= 1``, see
    :mod:`trainer.optim.param_groups`) take the plain Adam step :math:`w \leftarrow w - \text{lr}\,r`:
    no weight decay, ratio 1.

    Args:
        params: tensors, ``(name, tensor)`` pairs (``model.named_parameters()``) or param groups.
        lr: learning rate (>= 0).
        betas: :math:`(\beta_1, \beta_2)`, each in [0, 1).
        eps: :math:`\epsilon` (> 0; it also keeps a zero gradient from dividing 0 by 0).
        weight_decay: :math:`\lambda` (>= 0), decoupled from the moments as in AdamW.
        exclude: which parameters skip weight decay and the trust ratio.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float,
        betas: Tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
        exclude: ExcludeSpec = exclude_1d,
    ) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults, exclude)

    def _check_hyperparameters(self, group: Dict[str, Any]) -> None:
        _check_adam_hyperparameters(group)

    def _step_bucket(self, group: Dict[str, Any], bucket: _Bucket) -> None:
        beta1, beta2 = group["betas"]
        exp_avgs, exp_avg_sqs, steps = _adam_moments(self.state, bucket.params, _zeros_like)

        torch._foreach_mul_(exp_avgs, beta1)
        torch._foreach_add_(exp_avgs, bucket.grads, alpha=1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, bucket.grads, bucket.grads, value=1 - beta2)

        # sqrt(v_hat) = sqrt(v) / sqrt(1 - beta2^t); dividing after the sqrt avoids a second temporary.
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denom, [math.sqrt(1 - beta2**t) for t in steps])
        torch._foreach_add_(denom, group["eps"])
        update = torch._foreach_div(exp_avgs, [1 - beta1**t for t in steps])
        torch._foreach_div_(update, denom)

        if not bucket.excluded:
            if group["weight_decay"] != 0:
                torch._foreach_add_(update, bucket.params, alpha=group["weight_decay"])
            torch._foreach_mul_(update, _trust_ratios(bucket.params, update))
        torch._foreach_add_(bucket.params, update, alpha=-group["lr"])


def _zeros_like(p: Tensor) -> Tensor:
    return torch.zeros_like(p, memory_format=torch.preserve_format)


def _trust_ratios(
    params: List[Tensor], updates: Union[List[Tensor], Tuple[Tensor, ...]]
) -> List[Tensor]:
    """``||w|| / ||u||`` per tensor as 0-d tensors (1 where either norm is 0), without a host sync."""
    w_norm = torch.stack(torch._foreach_norm(params))
    u_norm = torch.stack(torch._foreach_norm(updates))
    # where() discards the inf/nan of 0/0 in the branch it does not select.
    ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
    return list(ratio.unbind(0))
