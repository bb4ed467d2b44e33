"""`FieldAttribute`: an attribute of the Trainer that is a field of one of its parts (its config, its
run state), typed by the reader that names the field, and checked to read the field of its own name."""
from __future__ import annotations

import operator
from typing import Any, Callable, Generic, TypeVar, overload

_Owner = TypeVar("_Owner")
_T = TypeVar("_T")


class FieldAttribute(Generic[_Owner, _T]):
    """A descriptor on ``_Owner`` whose value is the field ``read`` reads (``lambda run: run.should_stop``)
    of the owner's part named `_source`, so that the attribute has the field's type; subclasses name
    the part and, where the field is not the attribute's name, its path (`_path`)."""

    _source = ""  # the owner's attribute holding the fields ("run", "config")

    def __init__(self, read: Callable[[Any], _T]) -> None:
        self._read = read

    def __set_name__(self, owner: type, name: str) -> None:
        path = self._path(name)
        check_reads(self._read, path, f"{owner.__name__}.{name}")
        self.name = name
        # the same path as `read`, read in C: a read is one Python call (the Trainer reads some every step,
        # tests/loops/test_step_call_budget.py)
        self._get = operator.attrgetter(".".join((self._source, *path)))

    def _path(self, name: str) -> tuple[str, ...]:
        """The attribute names ``read`` must read for the attribute ``name``."""
        return (name,)

    @overload
    def __get__(self, owner: None, owner_type: type | None = None) -> FieldAttribute[_Owner, _T]: ...

    @overload
    def __get__(self, owner: _Owner, owner_type: type | None = None) -> _T: ...

    def __get__(self, owner: _Owner | None, owner_type: type | None = None) -> FieldAttribute[_Owner, _T] | _T:
        if owner is None:
            return self
        return self._get(owner)  # type: ignore[no-any-return]


class _Path:
    """What a field reader reads: the attribute names, in order (`check_reads`)."""

    def __init__(self, names: tuple[str, ...] = ()) -> None:
        self.names = names

    def __getattr__(self, name: str) -> _Path:
        return _Path((*self.names, name))


def check_reads(read: Callable[[Any], object], path: tuple[str, ...], where: str) -> None:
    """Raise `TypeError` unless ``read`` reads exactly ``path`` (``("limits", "max_epochs")``) of its argument:
    the attribute's name and the field it reads are one name."""
    got = read(_Path())
    if not isinstance(got, _Path) or got.names != path:
        raise TypeError(f"{where} must read {'.'.join(path)}, not {'.'.join(getattr(got, 'names', ('?',)))}")
