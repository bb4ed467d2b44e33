"""Hyperparameters: ``save_hyperparameters`` / ``hparams`` (shared by `TrainModule` and `DataModule`),
and rebuilding an object from the ones a checkpoint saved."""
from __future__ import annotations

import argparse
import copy
import dataclasses
import inspect
import types
from typing import Any, Mapping, Sequence

from torch import nn

from trainer.distributed.rank_zero import rank_zero_warn
from trainer.contracts.user_line import user_stacklevel


class AttributeDict(dict[str, Any]):
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
    _log_hyperparams = True  # save_hyperparameters(logger=False): the loggers do not get them
    _hparams_name: str | None = None

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
    def hparams_name(self) -> str | None:
        """Lightning's ``hparams_name`` checkpoint entry: the ``__init__`` argument that was the one
        object given to ``save_hyperparameters`` (``"hparams"``), else ``"kwargs"``; loading gives
        that argument the saved hyperparameters as its one value."""
        return self._hparams_name

    @property
    def hparams_initial(self) -> AttributeDict:
        """A copy of what ``save_hyperparameters`` recorded, unchanged by later edits of ``hparams``."""
        return AttributeDict(self.__dict__.get("_hparams_initial") or {})

    def save_hyperparameters(
        self,
        *args: Any,
        ignore: str | Sequence[str] | None = None,
        frame: types.FrameType | None = None,
        logger: bool = True,
    ) -> None:
        """Record the ``__init__`` arguments in ``self.hparams`` (logged and checkpointed), as Lightning does.

        Called in a base class's ``__init__`` it collects the arguments of every ``__init__`` up the
        call (the subclass's included, its values winning); ``**kwargs`` count by their keys, ``*args``
        not. ``save_hyperparameters("lr", "depth")`` keeps some, ``ignore=`` drops some (also from
        what an earlier call saved), one dict or ``argparse.Namespace`` is merged into the hparams,
        ``logger=False`` keeps them from the loggers, ``frame=`` names the ``__init__`` frame to read.
        """
        self._log_hyperparams = logger
        if len(args) == 1 and not args[0]:  # an empty container: nothing to record (Lightning's rule)
            return
        if frame is None:
            current = inspect.currentframe()
            frame = current.f_back if current is not None else None
        ignored = [ignore] if isinstance(ignore, str) else [n for n in ignore or () if isinstance(n, str)]
        init_args = {k: v for k, v in self._init_arguments(frame).items() if k not in ignored}
        chosen = _chosen(args, init_args)
        self._hparams_name = _argument_named(args, chosen, init_args)
        self._merge_hparams(chosen)
        for name in ignored:  # a subclass may drop what its base class saved
            self.hparams.pop(name, None)
        self._keep_initial()

    def _init_arguments(self, frame: types.FrameType | None) -> dict[str, Any]:
        if dataclasses.is_dataclass(self):
            return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        return _collect_init_args(frame, type(self).__name__)

    def _keep_initial(self) -> None:
        for name, value in self.hparams.items():
            if isinstance(value, nn.Module):
                rank_zero_warn(
                    f"Attribute {name!r} is an instance of `nn.Module` and is already saved during checkpointing. "
                    f"It is recommended to ignore them using `self.save_hyperparameters(ignore=[{name!r}])`.",
                    stacklevel=user_stacklevel(),
                )
        try:
            initial = copy.deepcopy(dict(self.hparams))
        except Exception:  # an argument that does not copy (a lock, an open file): keep the object itself
            initial = dict(self.hparams)
        self.__dict__["_hparams_initial"] = initial

    def _merge_hparams(self, given: Any) -> None:
        if isinstance(given, argparse.Namespace):
            given = vars(given)
        if not isinstance(given, Mapping):
            raise TypeError(
                "save_hyperparameters takes argument names, or one dict or argparse.Namespace; "
                f"got {type(given).__name__}."
            )
        self.hparams.update(given)  # as Lightning: a second call adds to the first


def _chosen(args: tuple[Any, ...], init_args: dict[str, Any]) -> Any:
    """What ``save_hyperparameters(*args)`` records: all, the named ones, or the one object given."""
    if not args:
        return init_args
    objects = [a for a in args if not isinstance(a, str)]
    if len(objects) == 1:
        return objects[0]
    unknown = [n for n in args if isinstance(n, str) and n not in init_args]
    if unknown:
        raise ValueError(f"save_hyperparameters: {unknown} are not arguments of __init__ ({list(init_args)})")
    return {n: init_args[n] for n in args if isinstance(n, str)}


def _argument_named(args: tuple[Any, ...], chosen: Any, init_args: dict[str, Any]) -> str | None:
    """Lightning's ``hparams_name``: the argument holding the one object given, else ``"kwargs"``."""
    if any(not isinstance(a, str) for a in args):
        return next((name for name, value in init_args.items() if value is chosen), None)
    return "kwargs" if chosen else None


def _collect_init_args(frame: types.FrameType | None, class_name: str) -> dict[str, Any]:
    """The arguments of the ``__init__`` calls from ``frame`` outwards, the outermost's values winning.

    Lightning's walk: frames are skipped until the first ``__init__`` of a hyperparameters object
    (one that uses ``super()``), then collected while they are such ``__init__`` frames. Where
    there is none, the calling ``__init__``'s own arguments (Lightning would record nothing).
    """
    collected: list[dict[str, Any]] = []
    caller = frame
    while frame is not None and frame.f_back is not None:
        owner, args = init_frame_arguments(frame)
        if isinstance(owner, HyperparametersMixin):
            collected.append(args)
        elif collected:
            break
        frame = frame.f_back
    if not collected:  # an __init__ without super() (Lightning records nothing there): its own arguments
        if caller is None or caller.f_code.co_name != "__init__":
            raise RuntimeError(f"save_hyperparameters() must be called from your {class_name}'s __init__")
        collected.append(_code_args(caller))
    merged: dict[str, Any] = {}
    for args in collected:
        merged.update(args)
    return merged


def _code_args(frame: types.FrameType) -> dict[str, Any]:
    """An ``__init__`` frame's arguments read from its code (``self`` and ``*args`` left out)."""
    code, values = frame.f_code, frame.f_locals
    n_args = code.co_argcount + code.co_kwonlyargcount
    args = {n: values[n] for n in code.co_varnames[1:n_args] if n in values}
    if code.co_flags & inspect.CO_VARKEYWORDS:
        args.update(values.get(code.co_varnames[n_args + bool(code.co_flags & inspect.CO_VARARGS)], {}))
    return args


def init_frame_arguments(frame: types.FrameType) -> tuple[Any, dict[str, Any]]:
    """The object an ``__init__`` frame initializes, and its arguments as they are now (None, {} otherwise)."""
    values = frame.f_locals
    if "__class__" not in values or frame.f_code.co_name != "__init__":
        return None, {}
    params = inspect.signature(values["__class__"].__init__).parameters
    kinds = {p.kind: name for name, p in params.items()}
    self_name = next(iter(params), None)
    var_args, var_kwargs = kinds.get(inspect.Parameter.VAR_POSITIONAL), kinds.get(inspect.Parameter.VAR_KEYWORD)
    args = {name: values[name] for name in params if name in values}
    if var_kwargs:
        args.update(args.get(var_kwargs, {}))
    excluded = {self_name, var_args, var_kwargs, "__class__", "frame", "frame_args"}
    owner = values.get(self_name) if self_name is not None else None
    return owner, {k: v for k, v in args.items() if k not in excluded}


def instantiate(
    cls: type[Any], saved: Mapping[str, Any], text_only: Sequence[str], has_objects: bool,
    overrides: Mapping[str, Any], path: str,
) -> Any:
    """``cls(**saved, **overrides)``, the saved hyperparameters limited to what ``cls.__init__`` takes.

    Arguments ``__init__`` requires that neither provides are a `TypeError` naming them, and so are
    the arguments it takes that the checkpoint holds only as text (``text_only``: an object's repr
    cannot stand in for the object) unless ``overrides`` gives them; ``has_objects``: the file also
    holds those objects pickled, for a caller who trusts it.
    """
    params = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    named = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    kwargs = {k: v for k, v in saved.items() if takes_any or k in named}
    _refuse_text_only(cls, sorted(n for n in text_only if n in kwargs and n not in overrides), has_objects, path)
    kwargs.update(overrides)
    _refuse_missing(cls, params, kwargs, saved, path)
    return cls(**kwargs)


def _refuse_missing(
    cls: type[Any], params: Mapping[str, inspect.Parameter], kwargs: Mapping[str, Any], saved: Mapping[str, Any], path: str
) -> None:
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


def _refuse_text_only(cls: type[Any], as_text: list[str], has_objects: bool, path: str) -> None:
    if not as_text:
        return
    given = ", ".join(f"{n}=..." for n in as_text)
    if has_objects:
        raise TypeError(
            f"{cls.__name__}.load_from_checkpoint({path!r}): the checkpoint holds {as_text} as objects that only "
            "unpickling rebuilds, which can run code from the file; with weights_only=True only their text "
            "(repr) was read, and __init__ cannot take it in their place. If you trust the file, pass "
            f"weights_only=False to rebuild them (as Lightning does); otherwise pass {given} to load_from_checkpoint."
        )
    raise TypeError(
        f"{cls.__name__}.load_from_checkpoint({path!r}): the checkpoint holds {as_text} only as text "
        "(their repr: objects torch.load(weights_only=True) cannot read back), which __init__ cannot "
        f"take in their place. Pass {given} to load_from_checkpoint, or keep them out with "
        "self.save_hyperparameters(ignore=[...])."
    )


def hparams_for_loggers(module: HyperparametersMixin, datamodule: object) -> dict[str, Any]:
    """What the loggers get: the module's and the DataModule's hparams (``datamodule``: the run's
    DataModule, or None), each unless saved with ``logger=False``."""
    return merged_hparams(
        module.hparams if module._log_hyperparams else {},
        datamodule.hparams if isinstance(datamodule, HyperparametersMixin) and datamodule._log_hyperparams else None,
    )


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
