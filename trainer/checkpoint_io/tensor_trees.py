"""Nested dicts of tensors split into their tensors (written to the shards) and the rest (``meta.pt``), and put back."""
from __future__ import annotations

from typing import Any, Mapping

import torch

_NOTHING = object()


def as_tree(value: Any) -> Any:
    """A list as a dict keyed "0", "1", ... (how the shards name its entries); anything else as it is."""
    return {str(i): v for i, v in enumerate(value)} if isinstance(value, list) else value


def as_list(value: dict[str, Any]) -> list[Any]:
    """The inverse of `as_tree` for a list."""
    return [value[str(i)] for i in range(len(value))]


def split_tensors(value: Any) -> tuple[Any, Any]:
    """(the tensors in the nested dicts ``value``, ``value`` without them); lists are leaves."""
    if isinstance(value, torch.Tensor):
        return value, _NOTHING
    if not isinstance(value, Mapping):
        return _NOTHING, value
    tensors, rest = {}, {}
    for k, v in value.items():
        t, r = split_tensors(v)
        if t is not _NOTHING and (not isinstance(t, dict) or t):
            tensors[k] = t
        if r is not _NOTHING:
            rest[k] = r
    return tensors, rest


def merge_tensors(rest: Any, tensors: Any) -> Any:
    """The inverse of `split_tensors`: ``rest`` with ``tensors`` put back in place."""
    if not isinstance(tensors, Mapping):
        return tensors
    merged = dict(rest) if isinstance(rest, Mapping) else {}
    for k, v in tensors.items():
        merged[k] = merge_tensors(merged.get(k), v)
    return merged


def keep_tensors(tree: dict[str, Any], wanted: Any, at: tuple[str, ...] = ()) -> dict[str, Any]:
    """``tree`` with only the leaves whose key path ``wanted`` accepts (emptied dicts dropped)."""
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            sub = keep_tensors(v, wanted, (*at, str(k)))
            if sub:
                out[k] = sub
        elif wanted((*at, str(k))):
            out[k] = v
    return out
