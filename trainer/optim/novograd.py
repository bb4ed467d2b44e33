"""NovoGrad: momentum SGD on gradients normalized by a per-layer second moment."""
from __future__ import annotations

from typing import Any, Dict, Tuple

import torch
from torch import Tensor

from trainer.contracts.arguments import check_bool
from trainer.optim.param_groups import (
    ExcludeSpec,
    ParamsT,
    _adam_moments,
    _Bucket,
    _check_adam_hyperparameters,
    _ExcludingOptimizer,
    exclude_1d,
)


class NovoGrad(_ExcludingOptimizer):
    r"""NovoGrad (Ginsburg et al. 2019, "Stochastic Gradient Methods with Layer-wise Adaptive
    Moments for Training of Deep Networks", arXiv:1905.11286).

    The second moment is one scalar per parameter tensor ("layer"), tracking the squared
    gradient norm. For a layer :math:`w` with gradient :math:`g` and :math:`\lambda` =
    ``weight_decay``:

    .. math::

        v &\leftarrow \begin{cases} \|g\|^2 & \text{first step of this layer} \\
            \beta_2 v + (1 - \beta_2)\|g\|^2 & \text{afterwards} \end{cases} \\
        m &\leftarrow \beta_1 m + c\left(\frac{g}{\sqrt{v} + \epsilon} + \lambda w\right),
            \qquad c = 1 - \beta_1 \text{ if ``grad_averaging`` else } 1 \\
        w &\leftarrow w - \text{lr} \cdot m

    with :math:`m` starting at 0. There is no bias correction: initialising :math:`v` with the
    first :math:`\|g\|^2` already removes the bias towards 0 of the second moment.

    Excluded parameters (see :mod:`trainer.optim.param_groups`; by default tensors with
    ``ndim <= 1``) get no weight decay; they are still normalized by their own :math:`v`,
    which is NovoGrad itself rather than a trust ratio. With the default ``weight_decay=0``
    ``exclude`` therefore changes nothing.

    Args:
        params: tensors, ``(name, tensor)`` pairs (``model.named_parameters()``) or param groups.
        lr: learning rate (>= 0).
        betas: :math:`(\beta_1, \beta_2)`, each in [0, 1).
        eps: :math:`\epsilon` (> 0; it also keeps a zero gradient from dividing 0 by 0).
        weight_decay: :math:`\lambda` (>= 0).
        grad_averaging: scale the new term by :math:`1 - \beta_1` (an exponential average).
        exclude: which parameters skip weight decay.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float,
        betas: Tuple[float, float] = (0.95, 0.98),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        grad_averaging: bool = False,
        exclude: ExcludeSpec = exclude_1d,
    ) -> None:
        defaults = dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, grad_averaging=grad_averaging
        )
        super().__init__(params, defaults, exclude)

    def _check_hyperparameters(self, group: Dict[str, Any]) -> None:
        _check_adam_hyperparameters(group)
        check_bool("grad_averaging", group["grad_averaging"])

    def _step_bucket(self, group: Dict[str, Any], bucket: _Bucket) -> None:
        beta1, beta2 = group["betas"]
        exp_avgs, exp_avg_sqs, steps = _adam_moments(self.state, bucket.params, _zero_norm)
        is_first = [t == 1 for t in steps]

        norms = torch._foreach_norm(bucket.grads)
        first = [i for i, f in enumerate(is_first) if f]
        later = [i for i, f in enumerate(is_first) if not f]
        if later:
            later_v = [exp_avg_sqs[i] for i in later]
            later_n = [norms[i] for i in later]
            torch._foreach_mul_(later_v, beta2)
            torch._foreach_addcmul_(later_v, later_n, later_n, value=1 - beta2)
        if first:
            first_n = [norms[i] for i in first]
            torch._foreach_addcmul_([exp_avg_sqs[i] for i in first], first_n, first_n, value=1.0)

        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_add_(denom, group["eps"])
        update = torch._foreach_div(bucket.grads, denom)
        if not bucket.excluded and group["weight_decay"] != 0:
            torch._foreach_add_(update, bucket.params, alpha=group["weight_decay"])
        torch._foreach_mul_(exp_avgs, beta1)
        torch._foreach_add_(exp_avgs, update, alpha=(1 - beta1) if group["grad_averaging"] else 1.0)
        torch._foreach_add_(bucket.params, exp_avgs, alpha=-group["lr"])


def _zero_norm(p: Tensor) -> Tensor:
    # Zero, so that adding ||g||^2 with weight 1 sets v to it on the first step.
    return torch.zeros((), dtype=p.dtype, device=p.device)
