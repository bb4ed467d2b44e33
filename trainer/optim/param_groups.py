"""Which parameters are *excluded* from weight decay and from the layer-wise trust ratio.

Layer-wise adaptive optimizers (LARS, You et al. 2017; LAMB, You et al. 2019) scale each
layer's step by a ratio of norms such as ``||w|| / ||update||``. For biases and normalization
scales/shifts that ratio is not meaningful (their norm says nothing about the layer's scale,
and a zero-initialised bias would never move), and decaying them towards zero costs accuracy
(Goyal et al. 2017). The usual practice, and the default here, is to *exclude* every tensor with
at most one dimension: an excluded parameter gets no weight decay and a trust ratio of 1, i.e.
it takes the plain momentum-SGD step (LARS) or the plain Adam step (LAMB).

How a param group records the decision: after the group is added to one of the optimizers in
this package, ``group["excluded"]`` is a list of bools, one per entry of ``group["params"]``.
It is decided once, when the group is added, from the first rule that applies:

1. an ``"excluded"`` key already in the group dict: a bool for the whole group, or a list with
   one bool per parameter (this is what :func:`named_param_groups` produces);
2. otherwise the optimizer's ``exclude`` argument:

   - :func:`exclude_1d` (the default): excluded iff ``param.ndim <= 1``;
   - ``None``: nothing is excluded;
   - a callable ``(name, param) -> bool``: excluded iff it returns true;
   - a string or a list of strings: excluded iff one of them is a substring of the name.

A callable or a non-empty name list *replaces* the 1-D rule (combine them yourself:
``exclude=lambda n, p: p.ndim <= 1 or "pos_embed" in n``), and needs parameter names. A bare
iterable of tensors has none, so pass ``model.named_parameters()`` (``(name, tensor)`` pairs)
or the groups built by :func:`named_param_groups`; without names those two forms raise.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from trainer.contracts.arguments import check_number

def check_betas(value: Any) -> Tuple[float, float]:
    """A pair of decay rates, each in [0, 1): a rate of 1 would never forget and never learn."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"betas must be a pair (beta1, beta2), got {value!r}")
    return (
        check_number("betas[0]", value[0], minimum=0, below=1),
        check_number("betas[1]", value[1], minimum=0, below=1),
    )


ParamsT = Union[Iterable[Tensor], Iterable[Tuple[str, Tensor]], Iterable[Dict[str, Any]]]
"""What the optimizers accept as ``params``: tensors, ``(name, tensor)`` pairs, or param groups."""

ExcludeFn = Callable[[str, Tensor], bool]
ExcludeSpec = Union[ExcludeFn, str, Sequence[str], None]
"""The ``exclude`` argument: :func:`exclude_1d`, ``None``, a callable, or name substrings."""

# Keys a caller may not pass through `named_param_groups(**options)`: the function owns them.
_OWNED_KEYS = ("params", "param_names", "excluded")


def exclude_1d(name: str, param: Tensor) -> bool:
    """Default exclusion rule: tensors with at most one dimension (biases, norm weights, scalars).

    The name is ignored, so this rule also works for parameters passed without names.
    """
    return param.ndim <= 1


@dataclass(frozen=True)
class _NameSubstrings:
    """Exclusion by name: a class instead of a closure so optimizers holding it still pickle."""

    substrings: Tuple[str, ...]

    def __call__(self, name: str, param: Tensor) -> bool:
        return any(s in name for s in self.substrings)


def _resolve_exclude(exclude: Any) -> Optional[ExcludeFn]:
    """Turn the user-facing ``exclude`` argument into a predicate (``None``: exclude nothing)."""
    if exclude is None or exclude is exclude_1d:
        return exclude
    if isinstance(exclude, str):
        exclude = [exclude]
    elif callable(exclude):
        predicate: ExcludeFn = exclude  # a callable the user gave: (name, param) -> bool
        return predicate
    if not isinstance(exclude, Iterable):
        raise TypeError(
            "exclude must be None, a callable (name, param) -> bool, or a list of name substrings, "
            f"got {type(exclude).__name__}"
        )
    substrings = tuple(exclude)
    for s in substrings:
        if not isinstance(s, str):
            raise TypeError(f"exclude name substrings must be str, got {type(s).__name__} {s!r}")
        if not s:
            # "" is a substring of every name: almost certainly a mistake, not "exclude all".
            raise ValueError("exclude name substrings must be non-empty; use a callable to exclude all")
    return _NameSubstrings(substrings)


def _needs_names(exclude: Optional[ExcludeFn]) -> bool:
    if exclude is None or exclude is exclude_1d:
        return False
    if isinstance(exclude, _NameSubstrings):
        return bool(exclude.substrings)
    return True


def _exclusion_mask(
    params: Sequence[Tensor], names: Optional[Sequence[str]], exclude: Optional[ExcludeFn], owner: str
) -> List[bool]:
    if exclude is None:
        return [False] * len(params)
    if names is None:
        if _needs_names(exclude):
            raise ValueError(
                f"{owner}: exclude={exclude!r} decides by parameter name, but the parameters were "
                "given without names; pass model.named_parameters() or "
                "trainer.optim.named_param_groups(model, exclude=...)"
            )
        names = [""] * len(params)
    return [bool(exclude(name, p)) for name, p in zip(names, params)]


def _split_names(group: Dict[str, Any]) -> Tuple[List[Tensor], Optional[List[str]]]:
    """Separate ``(name, tensor)`` pairs into tensors and names (names also from ``param_names``)."""
    raw = group["params"]
    if isinstance(raw, Tensor):
        raw = [raw]
    elif isinstance(raw, (set, frozenset)):
        raise TypeError("params must be an ordered collection, not a set: set order changes between runs")
    else:
        raw = list(raw)
    params: List[Tensor] = []
    names: List[str] = []
    for entry in raw:
        if isinstance(entry, tuple):
            if len(entry) != 2 or not isinstance(entry[0], str):
                raise TypeError(f"named parameters must be (str, Tensor) pairs, got {entry!r:.80}")
            names.append(entry[0])
            params.append(entry[1])
        else:
            params.append(entry)
    if names and len(names) != len(params):
        raise ValueError("give every parameter of a group a name, or none of them")
    if not names and group.get("param_names") is not None:
        names = list(group["param_names"])
        if len(names) != len(params):
            raise ValueError(
                f"param_names has {len(names)} entries but the group has {len(params)} parameters"
            )
    return params, (names or None)


def named_param_groups(
    model: Union[nn.Module, Iterable[Tuple[str, Tensor]]],
    exclude: ExcludeSpec = exclude_1d,
    *,
    weight_decay: Optional[float] = None,
    **options: Any,
) -> List[Dict[str, Any]]:
    """Split a model's trainable parameters into an adapted group and an excluded group.

    Returns up to two param groups (empty ones are dropped), each keeping the parameter names::

        [{"params": [...], "param_names": [...], "excluded": False, **options},
         {"params": [...], "param_names": [...], "excluded": True, **options}]

    Frozen parameters (``requires_grad=False``) are left out; a tied tensor appears once.
    ``exclude`` follows the module docstring's rules. With ``weight_decay`` set, the adapted
    group gets ``weight_decay`` and the excluded group ``0.0``, which makes the same groups
    correct for optimizers that know nothing of ``"excluded"`` (e.g. ``torch.optim.AdamW``).

    Example::

        LAMB(named_param_groups(model, exclude=["bias", "norm"]), lr=1e-2)
    """
    exclude_fn = _resolve_exclude(exclude)
    for key in _OWNED_KEYS:
        if key in options:
            raise ValueError(f"named_param_groups sets {key!r} itself; do not pass it as an option")
    if weight_decay is not None:
        weight_decay = check_number("weight_decay", weight_decay, minimum=0)
    names, params = _trainable(model.named_parameters() if isinstance(model, nn.Module) else model)
    mask = _exclusion_mask(params, names, exclude_fn, "named_param_groups")
    groups: List[Dict[str, Any]] = []
    for excluded in (False, True):
        chosen = [i for i, m in enumerate(mask) if m == excluded]
        if not chosen:
            continue
        group: Dict[str, Any] = {
            "params": [params[i] for i in chosen],
            "param_names": [names[i] for i in chosen],
            "excluded": excluded,
            **options,
        }
        if weight_decay is not None:
            group["weight_decay"] = 0.0 if excluded else weight_decay
        groups.append(group)
    return groups


def _trainable(pairs: Iterable[Tuple[str, Tensor]]) -> Tuple[List[str], List[Tensor]]:
    """The names and tensors of the parameters that train, a tied tensor once (its first name)."""
    seen = set()
    names: List[str] = []
    params: List[Tensor] = []
    for name, p in pairs:
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        names.append(name)
        params.append(p)
    return names, params


def _check_adam_hyperparameters(group: Dict[str, Any]) -> None:
    """The hyperparameters LAMB and NovoGrad share with Adam."""
    check_number("lr", group["lr"], minimum=0)
    check_betas(group["betas"])
    check_number("eps", group["eps"], above=0)
    check_number("weight_decay", group["weight_decay"], minimum=0)


def _adam_moments(
    state: Dict[Tensor, Dict[str, Any]], params: List[Tensor], second_moment: Callable[[Tensor], Tensor]
) -> Tuple[List[Tensor], List[Tensor], List[int]]:
    """Each parameter's first and second moment, made on its first step (the second by
    ``second_moment``), and its step count, this step included."""
    exp_avgs: List[Tensor] = []
    exp_avg_sqs: List[Tensor] = []
    steps: List[int] = []
    for p in params:
        moments = state[p]
        if not moments:
            moments["step"] = 0
            moments["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            moments["exp_avg_sq"] = second_moment(p)
        # A plain int keeps the bias correction on the host: no device sync per step.
        moments["step"] += 1
        steps.append(moments["step"])
        exp_avgs.append(moments["exp_avg"])
        exp_avg_sqs.append(moments["exp_avg_sq"])
    return exp_avgs, exp_avg_sqs, steps


@dataclass
class _Bucket:
    """Parameters of one group that share device, dtype and exclusion: one foreach call each."""

    excluded: bool
    params: List[Tensor] = field(default_factory=list)
    grads: List[Tensor] = field(default_factory=list)


class _ExcludingOptimizer(Optimizer):
    """Base of LARS/LAMB/NovoGrad: accepts named parameters and records ``group["excluded"]``."""

    def __init__(self, params: ParamsT, defaults: Dict[str, Any], exclude: ExcludeSpec) -> None:
        if isinstance(params, (set, frozenset)):
            raise TypeError("params must be an ordered collection, not a set: set order changes between runs")
        # Set before Optimizer.__init__, which calls add_param_group for every group.
        self._exclude = _resolve_exclude(exclude)
        self._check_hyperparameters(defaults)
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group: Dict[str, Any]) -> None:
        raise NotImplementedError

    def _step_bucket(self, group: Dict[str, Any], bucket: _Bucket) -> None:
        raise NotImplementedError

    @torch.no_grad()
    def step(  # type: ignore[override]
        self, closure: Optional[Callable[[], float]] = None
    ) -> Optional[float]:
        """Take one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        # torch's Optimizer.step types the closure's value as the loss it returns
        loss: Optional[float] = _evaluate_closure(closure)
        for group in self.param_groups:
            for bucket in self._buckets(group):
                self._step_bucket(group, bucket)
        return loss

    def __getstate__(self) -> Dict[str, Any]:
        # Optimizer.__getstate__ keeps only defaults/state/param_groups; deepcopy would drop the rule.
        state = super().__getstate__()
        state["_exclude"] = self._exclude
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        state.setdefault("_exclude", exclude_1d)
        super().__setstate__(state)

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """Add a group; ``(name, tensor)`` pairs are accepted and the exclusion mask is computed."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        group = dict(param_group)
        params, names = _split_names(group)
        group["params"] = params
        if names is not None:
            group["param_names"] = names
        group["excluded"] = self._group_mask(group, params, names)
        self._check_hyperparameters({**self.defaults, **group})
        super().add_param_group(group)

    def _group_mask(
        self, group: Dict[str, Any], params: List[Tensor], names: Optional[List[str]]
    ) -> List[bool]:
        given = group.get("excluded")
        if given is None:
            return _exclusion_mask(params, names, self._exclude, type(self).__name__)
        if isinstance(given, bool):
            return [given] * len(params)
        mask = list(given)
        if len(mask) != len(params) or not all(isinstance(m, bool) for m in mask):
            raise ValueError(
                "group['excluded'] must be a bool or a list of bools, one per parameter; "
                f"got {given!r:.80} for {len(params)} parameters"
            )
        return mask

    def _buckets(self, group: Dict[str, Any]) -> List[_Bucket]:
        """Parameters with a gradient, grouped so each bucket can use one ``torch._foreach_*`` call."""
        if "excluded" not in group:
            # load_state_dict replaces groups with saved ones; a checkpoint written by an older
            # optimizer without the mask gets it recomputed instead of failing here.
            group["excluded"] = self._group_mask(group, group["params"], group.get("param_names"))
        buckets: Dict[Tuple[torch.device, torch.dtype, bool], _Bucket] = {}
        for p, excluded in zip(group["params"], group["excluded"]):
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError(f"{type(self).__name__} does not support sparse gradients")
            key = (p.device, p.dtype, excluded)
            bucket = buckets.get(key)
            if bucket is None:
                bucket = buckets[key] = _Bucket(excluded)
            bucket.params.append(p)
            bucket.grads.append(p.grad)
        return list(buckets.values())


def _evaluate_closure(closure: Optional[Callable[[], Any]]) -> Any:
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()
