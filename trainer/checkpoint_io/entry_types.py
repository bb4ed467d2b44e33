"""The type of every checkpoint entry the Trainer reads, checked when the file is loaded.

A checkpoint is a file anyone may write or damage. Each entry read later (the position, the
world size, the hyperparameters handed to ``__init__``...) is checked here once, so a wrong one
is a `CheckpointError` naming the file and the entry (``loops.fit_loop.dataset_size``), not a
bare ``ValueError`` from deep inside a restore. Entries the Trainer does not read (Lightning's
own loop state beside Lockstep's position, a callback's own keys) are left to their readers.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from trainer.contracts.errors import CheckpointError
from trainer.contracts.lightning_progress import BATCH_PROGRESS, EPOCH_PROGRESS, is_lightning_fit_loop

_Check = tuple[str, Callable[[Any], bool]]  # (what the entry must be, the test)


def _int(minimum: int) -> _Check:
    return f"an int >= {minimum}", lambda v: type(v) is int and v >= minimum


def _optional(check: _Check) -> _Check:
    return f"None or {check[0]}", lambda v: v is None or check[1](v)


def _list_of(what: str, test: Callable[[Any], bool]) -> _Check:
    return f"a list of {what}", lambda v: isinstance(v, (list, tuple)) and all(test(x) for x in v)


def _is_mapping(v: Any) -> bool:
    return isinstance(v, Mapping)


_MAPPING: _Check = ("a dict", _is_mapping)
_NAMES: _Check = ("a dict keyed by str", lambda v: isinstance(v, Mapping) and all(isinstance(k, str) for k in v))
_STR: _Check = ("a str", lambda v: isinstance(v, str))
_BOOL: _Check = ("a bool", lambda v: isinstance(v, bool))
_BYTE_TENSOR: _Check = ("a 1-d uint8 tensor", lambda v: isinstance(v, torch.Tensor) and v.dtype == torch.uint8 and v.dim() == 1)

# Top-level entries: read by the fit loop, the resume plan, load_from_checkpoint and the run identity.
_TOP: dict[str, _Check] = {
    "state_dict": _MAPPING,
    "format_version": _int(1),
    "epoch": _int(0),
    "global_step": _int(0),
    "loops": _MAPPING,
    "lr_scaled": _BOOL,
    "world_size": _int(1),
    "accumulate_grad_batches": _int(1),
    "run_id": _optional(_STR),
    "run_attempt": _int(0),
    "hyper_parameters": _optional(_NAMES),
    "hyper_parameters_as_text": _optional(_list_of("str", lambda x: isinstance(x, str))),
    "hparams_name": _optional(_STR),
    "hyper_parameters_pickled": _optional(_BYTE_TENSOR),
    "datamodule_hyper_parameters_pickled": _optional(_BYTE_TENSOR),
    "datamodule_hyper_parameters": _optional(_NAMES),
    "datamodule_hyper_parameters_as_text": _optional(_list_of("str", lambda x: isinstance(x, str))),
    "datamodule_hparams_name": _optional(_STR),
    "optimizer_states": _list_of("dicts", _is_mapping),
    "optimizer_classes": _list_of("str", lambda x: isinstance(x, str)),
    "lr_schedulers": _list_of("dicts", _is_mapping),
    "callbacks": _NAMES,
    "precision": _optional(_MAPPING),
    "rank_states": _list_of("dicts or None", lambda x: x is None or _is_mapping(x)),
}
# ``loops.fit_loop``: the position (`FitProgress.state_dict`); Lightning's keys there are not read.
_FIT_LOOP: dict[str, _Check] = {
    "batches_done": _int(0),
    "epoch_finished": _BOOL,
    "samples_done": _optional(_int(0)),
    "global_batch_size": _optional(_int(1)),
    "dataset_size": _optional(_int(0)),
    "shuffle": _optional(_BOOL),
    "batches_total": _optional(_int(0)),
}
_RANK_STATE: dict[str, _Check] = {"epoch_state": _optional(_MAPPING)}
# In a file Lightning wrote, its loops' counters say where the fit stands (`position_from_lightning`).
_COUNTERS: _Check = (
    "a dict of ints >= 0", lambda v: isinstance(v, Mapping) and all(type(x) is int and x >= 0 for x in v.values())
)
_PROGRESS: dict[str, _Check] = {"current": _COUNTERS, "total": _COUNTERS, "is_last_batch": _BOOL}


def check_entries(checkpoint: Mapping[str, Any], path: str) -> None:
    """Raise `CheckpointError` naming ``path`` and the first entry of ``checkpoint`` of the wrong type."""
    _check(checkpoint, _TOP, "", path)
    loops = checkpoint.get("loops")
    if isinstance(loops, Mapping) and "fit_loop" in loops:
        _check({"fit_loop": loops["fit_loop"]}, {"fit_loop": _MAPPING}, "loops.", path)
        _check(loops["fit_loop"], _FIT_LOOP, "loops.fit_loop.", path)
        _check_lightning_counters(loops["fit_loop"], path)
    for rank, state in enumerate(checkpoint.get("rank_states") or []):
        if state is not None:
            _check(state, _RANK_STATE, f"rank_states.{rank}.", path)


def _check_lightning_counters(fit_loop: Mapping[str, Any], path: str) -> None:
    if not is_lightning_fit_loop(fit_loop):
        return
    for key in (EPOCH_PROGRESS, BATCH_PROGRESS):
        if key in fit_loop:
            _check(fit_loop, {key: _MAPPING}, "loops.fit_loop.", path)
            _check(fit_loop[key], _PROGRESS, f"loops.fit_loop.{key}.", path)


def _check(entries: Mapping[str, Any], rules: Mapping[str, _Check], prefix: str, path: str) -> None:
    for key, (expected, test) in rules.items():
        if key in entries and not test(entries[key]):
            shown = repr(entries[key])
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise CheckpointError(
                f"Checkpoint {path!r}: its entry {prefix + key!r} must be {expected}, got {shown}. The file is "
                "damaged, or was not written by Lockstep or Lightning. Nothing was loaded."
            )
