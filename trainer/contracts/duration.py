"""Durations as the Trainer's ``max_time`` and the `Timer` take them."""
from __future__ import annotations

import datetime
import re

_DURATION_KEYS = ("days", "hours", "minutes", "seconds", "milliseconds", "microseconds", "weeks")


def parse_duration(name: str, value: object) -> datetime.timedelta | None:
    """A duration from ``"DD:HH:MM:SS"``, a dict of `datetime.timedelta` keywords or a timedelta.

    ``None`` stays ``None``. A wrong type is a `TypeError`, a bad value a `ValueError`, both naming
    ``name``.
    """
    if value is None or isinstance(value, datetime.timedelta):
        duration = value
    elif isinstance(value, str):
        match = re.fullmatch(r"(\d+):(\d{1,2}):(\d{1,2}):(\d{1,2})", value.strip())
        if match is None:
            raise ValueError(f"{name} as a string must be 'DD:HH:MM:SS' (e.g. '00:12:00:00'), got {value!r}")
        days, hours, minutes, seconds = map(int, match.groups())
        duration = datetime.timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    elif isinstance(value, dict):
        unknown = sorted(str(k) for k in value if k not in _DURATION_KEYS)
        if unknown:
            raise ValueError(f"{name} as a dict takes the keys {list(_DURATION_KEYS)}, got unknown {unknown}")
        for key, amount in value.items():
            if isinstance(amount, bool) or not isinstance(amount, (int, float)):
                raise TypeError(f"{name}[{key!r}] must be a number, got {amount!r}")
        duration = datetime.timedelta(**value)
    else:
        raise TypeError(
            f"{name} must be None, a 'DD:HH:MM:SS' string, a dict like {{'hours': 1}} or a "
            f"datetime.timedelta, got {value!r}"
        )
    if duration is not None and duration < datetime.timedelta(0):
        raise ValueError(f"{name} must not be negative, got {duration}")
    return duration
