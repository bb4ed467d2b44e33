"""Bounded waits on tracking services (MLflow, W&B): answer within a timeout, or fail or warn.

A tracking server on a closed port, or one that accepts connections and never answers, must not
hold a run for the client's own retries (MLflow's take minutes). The loggers ask first, with one
bounded request, and then either raise (``on_unreachable="raise"``) or warn and stop logging
(``"warn"``), as the user chose.
"""
from __future__ import annotations

import math
import urllib.error
import urllib.request
import warnings
from trainer.contracts.user_line import user_stacklevel

ON_UNREACHABLE = ("raise", "warn")


class ServiceUnreachableError(ConnectionError):
    """A tracking service did not answer within its timeout."""


def check_timeout_args(owner: str, timeout: float, on_unreachable: str) -> float:
    """``timeout`` as a float, after checking both arguments of ``owner``."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"{owner}(timeout={timeout!r}): expected a positive number of seconds.")
    if on_unreachable not in ON_UNREACHABLE:
        raise ValueError(f"{owner}(on_unreachable={on_unreachable!r}): expected one of {ON_UNREACHABLE}.")
    return float(timeout)


def http_problem(url: str, timeout: float) -> str | None:
    """Why the HTTP server at ``url`` gives no answer within ``timeout`` seconds, or None.

    Any HTTP response counts as an answer (an error status too): the server is there.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        return f"{type(reason).__name__}: {reason}"


def unreachable(owner: str, url: str, timeout: float, problem: str, on_unreachable: str, fallback: str) -> None:
    """Raise `ServiceUnreachableError`, or warn that ``fallback`` happens instead (``"warn"``)."""
    message = f"{owner}: {url} did not answer within {timeout:g} s ({problem})."
    if on_unreachable == "raise":
        raise ServiceUnreachableError(
            f"{message} Check the address, or pass on_unreachable='warn' to train without it."
        )
    warnings.warn(f"{message} {fallback}", stacklevel=user_stacklevel())
