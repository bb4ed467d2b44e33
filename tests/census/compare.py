"""Compare two census records (`tests.census.run_one`): Lightning's run and Lockstep's.

Two runs are equal when they made the same trainer calls in the same order and, after each, the
model's parameters (atol 1e-5), ``global_step``, the names and values of ``callback_metrics`` and
``logged_metrics`` (atol and rtol 1e-5) and the call's return value (test and predict outputs)
agree. `differences` names each disagreement.
"""
from __future__ import annotations

from typing import Any

import torch

TOLERANCE = 1e-5


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape:
            return False
        if not (a.is_floating_point() or b.is_floating_point()):
            return bool(torch.equal(a, b))
        return bool(torch.allclose(a.double(), b.double(), atol=TOLERANCE, rtol=TOLERANCE, equal_nan=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= TOLERANCE + TOLERANCE * abs(b)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return _close(torch.as_tensor(a), torch.as_tensor(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _metric_differences(where: str, kind: str, theirs: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    found = []
    if theirs.keys() != ours.keys():
        only_l, only_s = sorted(theirs.keys() - ours.keys()), sorted(ours.keys() - theirs.keys())
        found.append(f"{where} {kind} names: Lightning only {only_l}, Lockstep only {only_s}")
    wrong = sorted(k for k in theirs.keys() & ours.keys() if not _close(theirs[k], ours[k]))
    if wrong:
        found.append(f"{where} {kind} values {wrong[:4]}")
    return found


def _call_differences(index: int, theirs: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    where = f"{theirs['call']} #{index + 1}"
    found = []
    if theirs.get("raised") != ours.get("raised"):
        found.append(f"{where} raised: Lightning {theirs.get('raised')}, Lockstep {ours.get('raised')}")
    if theirs["global_step"] != ours["global_step"]:
        found.append(f"{where} global_step {theirs['global_step']} vs {ours['global_step']}")
    if theirs["params"].keys() != ours["params"].keys():
        found.append(f"{where} parameter names")
    else:
        wrong = [k for k in theirs["params"] if not _close(theirs["params"][k], ours["params"][k])]
        if wrong:
            found.append(f"{where} parameters ({len(wrong)} of {len(theirs['params'])} tensors, e.g. {wrong[0]})")
    for kind in ("callback_metrics", "logged_metrics"):
        found += _metric_differences(where, kind, theirs[kind], ours[kind])
    if not _close(theirs.get("returned"), ours.get("returned")):
        found.append(f"{where} return value")
    return found


def differences(theirs: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    """What differs between Lightning's record ``theirs`` and Lockstep's ``ours`` (empty: equal)."""
    calls_l, calls_s = [c["call"] for c in theirs["calls"]], [c["call"] for c in ours["calls"]]
    if calls_l != calls_s:
        return [f"trainer calls: Lightning {calls_l}, Lockstep {calls_s}"]
    found = []
    for index, (a, b) in enumerate(zip(theirs["calls"], ours["calls"])):
        found += _call_differences(index, a, b)
    return found
