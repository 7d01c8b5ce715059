"""Text that becomes a key in the store (run ids, signal names, quota keys, slot labels, filters)
never holds a NUL character.

PostgreSQL's text columns cannot keep NUL (U+0000) and SQLite's can; duro refuses it on both stores
alike, before anything is read or written, so a call behaves the same on either. JSON values
(inputs, signal payloads, outputs) may hold it: their JSON text spells it ``\\u0000``, which both
stores keep as it is.
"""

from __future__ import annotations

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
