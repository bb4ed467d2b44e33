"""``lightning.pytorch.utilities`` under Lockstep's name: what Lightning projects import from it
(``from trainer.utilities import rank_zero_only, grad_norm``), and the names of its submodules that
projects import (``rank_zero``, ``types``, ``seed``, ``grads``, ``exceptions``), flat.
Lightning's names that Lockstep lacks raise an error naming what to use instead."""
from __future__ import annotations

import importlib.util
import types
from typing import Any, ContextManager, Mapping, Optional, Union

import torch

from trainer.accelerators.accelerator import move_to_device
from trainer.distributed.rank_zero import rank_zero_info, rank_zero_only, rank_zero_warn
from trainer.hyperparameters import AttributeDict, init_frame_arguments
from trainer.rng import isolated_rng
from trainer.lightning.unsupported import not_provided

__all__ = [
    "AttributeDict",
    "EVAL_DATALOADERS",
    "MisconfigurationException",
    "OptimizerLRScheduler",
    "PossibleUserWarning",
    "STEP_OUTPUT",
    "TRAIN_DATALOADERS",
    "get_init_args",
    "grad_norm",
    "isolate_rng",
    "move_data_to_device",
    "rank_prefixed_message",
    "rank_zero_deprecation",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
]

# lightning.pytorch.utilities.types: what steps and hooks return, for annotations
STEP_OUTPUT = Optional[Union[torch.Tensor, Mapping[str, Any]]]
TRAIN_DATALOADERS = Any
EVAL_DATALOADERS = Any
OptimizerLRScheduler = Any
# what validate/test and predict return (private in Lightning; anomalib's Engine annotates with them)
_EVALUATE_OUTPUT = list[Mapping[str, float]]
_PREDICT_OUTPUT = Union[list[Any], list[list[Any]]]

# lightning.pytorch.utilities.imports: Lightning's own examples branch on it (private there too)
_TORCHVISION_AVAILABLE = importlib.util.find_spec("torchvision") is not None


class MisconfigurationException(Exception):
    """Lightning's exception for a wrong setting, for code that raises or catches it.

    Lockstep itself raises the built-in exceptions (`ValueError`, `TypeError`) instead.
    """


class PossibleUserWarning(UserWarning):
    """Lightning's warning category for a setting that may be a mistake (``utilities.warnings``), for
    code that filters or raises it."""


def rank_zero_deprecation(message: str, stacklevel: int = 4) -> None:
    """Issue a `DeprecationWarning` on global rank 0 only."""
    rank_zero_warn(message, DeprecationWarning, stacklevel=stacklevel)


def rank_prefixed_message(message: str, rank: Optional[int]) -> str:
    """``message`` prefixed with ``[rank: N]`` when ``rank`` is given (``utilities.rank_zero``; scvi-tools
    formats its callbacks' messages with it)."""
    return message if rank is None else f"[rank: {rank}] {message}"


def move_data_to_device(batch: Any, device: Union[str, torch.device]) -> Any:
    """Every tensor of ``batch`` (nested lists, tuples, dicts) moved to ``device``."""
    return move_to_device(batch, torch.device(device))


def get_init_args(frame: types.FrameType) -> dict[str, Any]:
    """The arguments of the ``__init__`` running in ``frame`` as they are now (``self``, ``*args``
    left out, ``**kwargs`` merged in); ``{}`` for another frame. Lightning's ``utilities.parsing``
    name (pytorch-forecasting saves its hyperparameters with it)."""
    return init_frame_arguments(frame)[1]


def isolate_rng(include_cuda: bool = True) -> ContextManager[None]:
    """A context in which random draws leave the global generators (Python, NumPy, torch) as they were."""
    del include_cuda  # Lockstep's isolation always covers the CUDA generators it saves
    return isolated_rng()


def grad_norm(module: torch.nn.Module, norm_type: Union[float, int, str], group_separator: str = "/") -> dict[str, torch.Tensor]:
    """Each parameter's gradient norm and their total, keyed as Lightning keys them for ``self.log_dict``.

    Keys are ``grad_{p}_norm{separator}{name}`` and ``grad_{p}_norm_total`` (``p`` as a float: ``2.0``).
    """
    p = float(norm_type)
    if p <= 0:
        raise ValueError(f"`norm_type` must be a positive number or 'inf' (infinity norm). Got {p}")
    norms = {
        f"grad_{p}_norm{group_separator}{name}": param.grad.detach().norm(p)
        for name, param in module.named_parameters()
        if param.grad is not None
    }
    if norms:
        norms[f"grad_{p}_norm_total"] = torch.stack(list(norms.values())).norm(p)
    return norms


def __getattr__(name: str) -> Any:
    raise not_provided(__name__, name)
