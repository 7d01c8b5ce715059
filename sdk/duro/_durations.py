"""Durations everywhere: ``"500ms"``, ``"10s"``, ``"45m"``, ``"2h"``, ``"30d"``, int milliseconds, timedelta.

A string is one or more parts (``"1h30m"``), each a number (ASCII digits, a decimal point allowed) and a
unit spelled exactly ``ms``, ``s``, ``m``, ``h`` or ``d``: no spaces, no capitals (``" 2h"`` and
``"2H"`` are refused, so what one tool accepts every other accepts too)."""

from __future__ import annotations

import re
from datetime import timedelta
from functools import lru_cache

from ._errors import DuroError

Duration = str | int | timedelta

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d))+")
_HINT = (
    "use e.g. '500ms', '10s', '45m', '2h', '30d' (or '1h30m'; units ms, s, m, h, d in lowercase, "
    "no spaces), an int of milliseconds or a timedelta"
)


def to_ms(value: Duration, what: str = "duration") -> int:
    """Return ``value`` in whole milliseconds; a clear :class:`DuroError` names ``what`` otherwise."""
    if isinstance(value, str):
        return _parse(value, what)
    if isinstance(value, bool):
        raise DuroError(f"{what} {value!r} is not a duration: {_HINT}")
    if isinstance(value, timedelta):
        ms = round(value.total_seconds() * 1000)
    elif isinstance(value, int):
        ms = value
    else:
        raise DuroError(f"{what} {value!r} is a {type(value).__name__}, not a duration: {_HINT}")
    if ms < 0:
        raise DuroError(f"{what} {value!r} is negative: durations must be zero or more")
    return _bounded(ms, value, what)


MAX_MS = 10 * 365 * 86_400_000  # ten years: longer is a mistake (and past what a timestamp adds up to)


def _bounded(ms: int, value: object, what: str) -> int:
    if ms > MAX_MS:
        raise DuroError(f"{what} {value!r} is longer than 10 years (3650d): give a shorter duration")
    return ms


@lru_cache(maxsize=512)
def _parse(value: str, what: str) -> int:
    if not _WHOLE.fullmatch(value):
        raise DuroError(f"{what} {value!r} is not understood: {_HINT}")
    total = sum(float(n) * _UNITS_MS[unit] for n, unit in _PART.findall(value))
    if not total <= MAX_MS:  # (a float: no overflow to inf can pass)
        raise DuroError(f"{what} {value!r} is longer than 10 years (3650d): give a shorter duration")
    return round(total)


def to_timedelta(value: Duration, what: str = "duration") -> timedelta:
    return timedelta(milliseconds=to_ms(value, what))


def format_ms(ms: int) -> str:
    """The shortest exact spelling of ``ms`` in the units above (``90000`` -> ``"90s"``)."""
    for unit in ("d", "h", "m", "s"):
        size = _UNITS_MS[unit]
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
