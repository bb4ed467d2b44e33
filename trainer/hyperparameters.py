"""Hyperparameters: ``save_hyperparameters`` / ``hparams`` (shared by `TrainModule` and `DataModule`),
and rebuilding an object from the ones a checkpoint saved."""
from __future__ import annotations

import argparse
import copy
import inspect
from typing import Any, Mapping


class AttributeDict(dict):
    """A dict whose keys also read as attributes: ``hparams["lr"] == hparams.lr`` (as in Lightning)."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(f"hparams has no {key!r} (it has {sorted(map(str, self))})") from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


class HyperparametersMixin:
    """``save_hyperparameters()`` records the calling ``__init__``'s arguments in ``self.hparams``."""

    _hparams: AttributeDict | None = None  # a class default, so a subclass need not call our __init__

    @property
    def hparams(self) -> AttributeDict:
        """What ``save_hyperparameters`` recorded (empty before); keys read as attributes too."""
        if self._hparams is None:
            self._hparams = AttributeDict()  # this object's own: never the class default
        return self._hparams

    @hparams.setter
    def hparams(self, value: Mapping[str, Any]) -> None:
        self._hparams = AttributeDict(value)

    @property
    def hparams_initial(self) -> AttributeDict:
        """A copy of what ``save_hyperparameters`` recorded, unchanged by later edits of ``hparams``."""
        return AttributeDict(self.__dict__.get("_hparams_initial") or {})

    def save_hyperparameters(self, *names: Any, ignore: str | list[str] | None = None, **_: Any) -> None:
        """Record the calling ``__init__``'s arguments in ``self.hparams`` (logged and checkpointed).

        As Lightning: ``save_hyperparameters("lr", "depth")`` keeps some, ``ignore=`` drops some, and
        one dict or ``argparse.Namespace`` (``save_hyperparameters(hparams)``) becomes the hparams.
        """
        if len(names) == 1 and not isinstance(names[0], str):
            given = vars(names[0]) if isinstance(names[0], argparse.Namespace) else names[0]
            if not isinstance(given, Mapping):
                raise TypeError(
                    "save_hyperparameters takes argument names, or one dict or argparse.Namespace; "
                    f"got {type(names[0]).__name__}."
                )
            self._set_hparams(dict(given), ignore)
            return
        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        if caller is None or caller.f_code.co_name != "__init__":
            raise RuntimeError(f"save_hyperparameters() must be called from your {type(self).__name__}'s __init__")
        code = caller.f_code
        n_args = code.co_argcount + code.co_kwonlyargcount
        arg_names = list(code.co_varnames[:n_args])
        values = caller.f_locals
        hparams = {n: values[n] for n in arg_names[1:] if n in values}  # skip `self`
        if code.co_flags & inspect.CO_VARKEYWORDS:
            hparams.update(values.get(code.co_varnames[n_args + bool(code.co_flags & inspect.CO_VARARGS)], {}))
        if names:
            unknown = [n for n in names if n not in hparams]
            if unknown:
                raise ValueError(f"save_hyperparameters: {unknown} are not arguments of __init__ ({list(hparams)})")
            hparams = {n: hparams[n] for n in names}
        self._set_hparams(hparams, ignore)

    def _set_hparams(self, hparams: dict[str, Any], ignore: str | list[str] | None) -> None:
        for n in [ignore] if isinstance(ignore, str) else ignore or ():
            hparams.pop(n, None)
        self.hparams = AttributeDict(hparams)
        try:
            initial = copy.deepcopy(hparams)
        except Exception:  # an argument that does not copy (a lock, an open file): keep the object itself
            initial = dict(hparams)
        self.__dict__["_hparams_initial"] = initial


def instantiate(cls: type[Any], saved: Mapping[str, Any], overrides: Mapping[str, Any], path: str) -> Any:
    """``cls(**saved, **overrides)``, the saved hyperparameters limited to what ``cls.__init__`` takes.

    Arguments ``__init__`` requires that neither provides are a `TypeError` naming them.
    """
    params = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    named = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    kwargs = {k: v for k, v in saved.items() if takes_any or k in named}
    kwargs.update(overrides)
    required = [
        n
        for i, (n, p) in enumerate(params.items())
        if i > 0 and p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    missing = [n for n in required if n not in kwargs]
    if missing:
        raise TypeError(
            f"{cls.__name__}.load_from_checkpoint({path!r}): __init__ needs {missing}, which the "
            f"checkpoint's hyperparameters do not hold (saved: {sorted(saved)}). Pass "
            f"{', '.join(f'{n}=...' for n in missing)} to load_from_checkpoint, or record them with "
            "self.save_hyperparameters() in __init__."
        )
    return cls(**kwargs)


def merged_hparams(module_hparams: Mapping[str, Any], datamodule_hparams: Mapping[str, Any] | None) -> dict[str, Any]:
    """The run's hyperparameters for the loggers: the module's and the DataModule's together.

    A name both hold with different values is a `ValueError` (which one the loggers should show
    is not ours to guess).
    """
    if not datamodule_hparams:
        return dict(module_hparams)
    shared = module_hparams.keys() & datamodule_hparams.keys()
    clash = sorted(k for k in shared if _differ(module_hparams[k], datamodule_hparams[k]))
    if clash:
        raise ValueError(
            f"The module's and the DataModule's hparams both hold {clash} with different values; "
            "rename one, or leave it out of one with save_hyperparameters(ignore=[...])."
        )
    return {**datamodule_hparams, **module_hparams}


def _differ(a: Any, b: Any) -> bool:
    try:
        return bool(a != b)
    except (RuntimeError, ValueError, TypeError):  # tensors or arrays of several elements
        return a is not b
