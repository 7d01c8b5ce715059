"""Text that becomes a key in the store (run ids, signal names, quota keys, slot labels, filters)
never holds a NUL character.

PostgreSQL's text columns cannot keep NUL (U+0000) and SQLite's can; duro refuses it on both stores
alike, before anything is read or written, so a call behaves the same on either. JSON values
(inputs, signal payloads, outputs) may hold it: their JSON text spells it ``\\u0000``, which both
stores keep as it is.
"""

from __future__ import annotations

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
