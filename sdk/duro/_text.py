"""Text that becomes a key in the store (run ids, signal names, quota keys, slot labels, filters)
never holds a NUL character.

PostgreSQL's text columns cannot keep NUL (U+0000) and SQLite's can; duro refuses it on both stores
alike, before anything is read or written, so a call behaves the same on either. JSON values
(inputs, signal payloads, outputs) may hold it: their JSON text spells it ``\\u0000``, which both
stores keep as it is.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from ._errors import DuroError

NUL = "\x00"
NO_NUL = "ids, names, keys and labels never hold a NUL character (\\x00)"
MAX_RUN_ID = 200


def check_run_id(run_id: object) -> str:
    """``run_id`` for a new run: a string of 1 to 200 characters without NUL; a :class:`DuroError` otherwise."""
    if not isinstance(run_id, str) or not 0 < len(run_id) <= MAX_RUN_ID or NUL in run_id:
        raise DuroError(
            f"run_id {run_id!r} is invalid: use a string of 1 to {MAX_RUN_ID} characters; {NO_NUL}"
        )
    return run_id


def refuse_nul(value: str, what: str) -> str:
    """``value``, or a :class:`DuroError` naming ``what`` (not the value: labels stay out of messages
    that may reach a log) when it holds a NUL character."""
    if NUL in value:
        raise DuroError(
            f"{what} contains a NUL character (\\x00); remove it: ids, names, keys and labels never hold one"
        )
    return value


MAX_KEY = 200  # a keyed limit's or a keyed rate's key, at most


def check_key_text(key: Any, owner: str, what: str) -> str:
    """A key of a keyed limit or rate (``owner``, as messages name it: ``limit 'api'``): a non-empty
    string of at most 200 characters without NUL (``what`` names it then). The key itself stays out
    of the messages: it is often a tenant or an account."""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY:
        raise DuroError(
            f"{owner}: key must be a non-empty string of at most {MAX_KEY} characters, got "
            f"{type(key).__name__}" + (f" of {len(key)}" if isinstance(key, str) else "")
        )
    return refuse_nul(key, f"{owner}: {what}")


def encode_cursor(*parts: object) -> str:
    """A page's cursor: the keyset of the last row of the page before, opaque to its reader."""
    return base64.urlsafe_b64encode(":".join(str(p) for p in parts).encode()).decode()


def decode_cursor(cursor: object, what: str, ints: int) -> tuple[list[int], str]:
    """The parts of a cursor :func:`encode_cursor` made of ``ints`` integers and an id (which may
    hold ``:``), or a :class:`DuroError` naming ``what`` and what to pass instead."""
    try:
        if not isinstance(cursor, str):
            raise ValueError(cursor)
        *numbers, last = base64.urlsafe_b64decode(cursor.encode()).decode().split(":", ints)
        if len(numbers) != ints or not last or NUL in last:
            raise ValueError(cursor)
        return [int(n) for n in numbers], last
    except (binascii.Error, UnicodeError, ValueError):
        raise foreign_cursor(cursor, what) from None


def foreign_cursor(cursor: object, what: str) -> DuroError:
    """The error for a cursor duro did not give (or not for this listing)."""
    return DuroError(
        f"{what} cursor {cursor!r} is not one duro gave; pass next_cursor of the previous page, "
        f"or None for the first page"
    )
