"""``load_from_checkpoint``: a `TrainModule` or `DataModule` rebuilt from a checkpoint (a file, or
a sharded checkpoint directory, read whole in this process).

The object is made from the hyperparameters the checkpoint saved (``save_hyperparameters``),
overridden by the caller's keyword arguments; then the saved state is loaded. The file is read
with ``weights_only=True`` (a checkpoint cannot run code when it is loaded) unless the caller
passes ``weights_only=False``, for a file it trusts.
"""
from __future__ import annotations

import inspect
import io
import os
from typing import Any, Mapping, TypeVar

import torch

from trainer.accelerators.accelerator import move_to_device
from trainer.checkpoint_io.sharded_read import load_full
from trainer.checkpoint_io.file_format import stored_as_text, weights_only_loadable
from trainer.hyperparameters import instantiate

_M = TypeVar("_M", bound=torch.nn.Module)  # a TrainModule
_D = TypeVar("_D")  # a DataModule

MODULE_HPARAMS_KEY = "hyper_parameters"
DATAMODULE_HPARAMS_KEY = "datamodule_hyper_parameters"  # Lightning's name for them
DATAMODULE_STATE_KEY = "datamodule"
# appended to a hyperparameters key: the names stored only as text (`file_format.stored_as_text`)
TEXT_ONLY_SUFFIX = "_as_text"
# appended to a hyperparameters key: those values themselves, pickled into bytes that only
# ``load_from_checkpoint(weights_only=False)`` unpickles (the file stays loadable with weights_only=True)
PICKLED_SUFFIX = "_pickled"


def load_module(
    cls: type[_M],
    path: str | os.PathLike[str],
    map_location: torch.device | str | None,
    strict: bool,
    overrides: Mapping[str, Any],
    weights_only: bool = True,
) -> _M:
    """`TrainModule.load_from_checkpoint`: rebuilt, weights loaded, in eval mode on ``map_location``."""
    device = _device(map_location)
    checkpoint = load_full(path, weights_only=weights_only)
    saved = _saved_hparams(cls, checkpoint, MODULE_HPARAMS_KEY, "hparams_name", weights_only)
    module = instantiate(cls, *saved, overrides, os.fspath(path))
    module.on_load_checkpoint(checkpoint)
    module.load_state_dict(checkpoint["state_dict"], strict=strict)
    # `instantiate` (typed Any) built ``cls(...)``: an _M, which `to` and `eval` return
    loaded: _M = module.to(device).eval()
    return loaded


def load_datamodule(
    cls: type[_D],
    path: str | os.PathLike[str],
    map_location: torch.device | str | None,
    overrides: Mapping[str, Any],
    weights_only: bool = True,
) -> _D:
    """`DataModule.load_from_checkpoint`: rebuilt, its saved ``state_dict`` (if any) loaded.

    Tensors in that state are put on ``map_location`` (the CPU by default).
    """
    device = _device(map_location)
    checkpoint = load_full(path, weights_only=weights_only)
    saved = _saved_hparams(cls, checkpoint, DATAMODULE_HPARAMS_KEY, "datamodule_hparams_name", weights_only)
    datamodule = instantiate(cls, *saved, overrides, os.fspath(path))
    if DATAMODULE_STATE_KEY in checkpoint:
        datamodule.load_state_dict(move_to_device(checkpoint[DATAMODULE_STATE_KEY], device))
    built: _D = datamodule  # `instantiate` (typed Any) built ``cls(...)``: a _D
    return built


def hparams_entries(owner: Any, key: str, name_key: str) -> dict[str, Any]:
    """A module's or DataModule's hyperparameters as the checkpoint keeps them under ``key``
    (loadable with ``weights_only=True``), the names among them kept only as text (an object's
    ``repr``: `load_from_checkpoint` must not hand that to ``__init__`` in the object's place), those
    objects pickled (given back by ``load_from_checkpoint(weights_only=False)``, as Lightning gives
    them back), and Lightning's ``hparams_name`` under ``name_key``."""
    entries: dict[str, Any] = {key: weights_only_loadable(dict(owner.hparams))}
    text_only = stored_as_text(owner.hparams)
    if text_only:
        entries[key + TEXT_ONLY_SUFFIX] = text_only
        pickled = _pickled({name: owner.hparams[name] for name in text_only})
        if pickled is not None:
            entries[key + PICKLED_SUFFIX] = pickled
    if owner.hparams_name:
        entries[name_key] = owner.hparams_name
    return entries


def _pickled(objects: dict[str, Any]) -> torch.Tensor | None:
    """``objects`` as torch.save writes them, held in a uint8 tensor (``bytes`` in a checkpoint stops
    ``torch.load(weights_only=True)`` before torch 2.4: ``_codecs.encode``); None when one cannot be
    pickled (a lambda, a lock): the run still saves, and loading asks for those arguments, as it
    does without this entry."""
    buffer = io.BytesIO()
    try:
        torch.save(objects, buffer)
    except Exception:
        return None
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _saved_hparams(
    cls: type[Any], checkpoint: Mapping[str, Any], key: str, name_key: str, weights_only: bool = True
) -> tuple[dict[str, Any], list[str], bool]:
    """The saved hyperparameters as ``__init__`` takes them, the names among them stored only as
    text, and whether the file holds those objects (read only when ``weights_only`` is False: the
    caller trusts the file). Lightning's rule for a checkpoint that names them (``hparams_name``, a
    library's or Lightning's own for ``save_hyperparameters(hparams)``): when ``__init__`` has an
    argument of that name, they are its one value."""
    saved = dict(checkpoint.get(key) or {})
    text_only = list(checkpoint.get(key + TEXT_ONLY_SUFFIX) or [])
    pickled = checkpoint.get(key + PICKLED_SUFFIX)
    if pickled is not None and not weights_only:
        saved.update(torch.load(io.BytesIO(bytes(pickled.tolist())), map_location="cpu", weights_only=False))
        text_only = []
    name = checkpoint.get(name_key)
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # not self, *args, **kwargs
    if isinstance(name, str) and name in [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]:
        return {name: saved}, [], False
    return saved, text_only, pickled is not None


def _device(map_location: Any) -> torch.device:
    if map_location is None:
        return torch.device("cpu")
    if isinstance(map_location, (str, torch.device)):
        return torch.device(map_location)
    raise TypeError(
        f"load_from_checkpoint(map_location=...) takes a torch.device, a device string ('cpu', "
        f"'cuda:0') or None (the CPU); got {type(map_location).__name__}."
    )


def check_weights_only(weights_only: Any) -> bool:
    """``load_from_checkpoint(weights_only=...)``: None (the default) or True reads safely; False unpickles."""
    if weights_only is not None and not isinstance(weights_only, bool):
        raise TypeError(f"load_from_checkpoint(weights_only={weights_only!r}): use True, False or None.")
    return weights_only is not False
