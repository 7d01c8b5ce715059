"""Database URLs: which ones duro takes, and duro's own options inside them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from .._durations import to_ms
from .._errors import DuroError
from .._extras import require
from . import _psycopg

DEFAULT_SQLITE_URL = "sqlite:///.duro/dev.db"
URL_HINT = "use sqlite:///path/to/file.db or postgresql+psycopg://user:password@host:5432/dbname"
DEFAULT_BUSY_TIMEOUT_MS = 30_000
_MAX_BUSY_TIMEOUT_MS = 3_600_000
_BUSY_TIMEOUT_HINT = (
    "use e.g. busy_timeout=2s, busy_timeout=500ms or whole milliseconds (busy_timeout=2000), "
    "at most 1h; leave it out for the default, 30s"
)


def parse_database_url(url: str | URL) -> tuple[URL, dict[str, Any]]:
    """Validate and normalise a database URL; returns it and duro's own options taken out of it
    (SQLite: ``synchronous``, and ``busy_timeout`` in milliseconds)."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except ArgumentError:
        raise DuroError(f"database URL {str(url)!r} is not a valid URL: {URL_HINT}") from None
    backend = parsed.get_backend_name()
    if backend in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
        require("psycopg", "postgres", "PostgreSQL")
        _psycopg.load()
    elif backend != "sqlite":
        raise DuroError(
            f"database URL {parsed.render_as_string(hide_password=True)!r} names backend "
            f"{backend!r}, which duro does not support: {URL_HINT}"
        )
    options: dict[str, Any] = {}
    if "synchronous" in parsed.query:
        if backend != "sqlite":
            raise DuroError("database URL option 'synchronous' applies to SQLite only; remove it")
        value = str(parsed.query["synchronous"]).upper()
        if value not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise DuroError(
                f"database URL option synchronous={value!r} is not one of OFF, NORMAL, FULL, EXTRA"
            )
        options["synchronous"] = value
        parsed = parsed.difference_update_query(["synchronous"])
    if "busy_timeout" in parsed.query:
        if backend != "sqlite":
            raise DuroError("database URL option 'busy_timeout' applies to SQLite only; remove it")
        options["busy_timeout"] = _busy_timeout_ms(parsed.query["busy_timeout"])
        parsed = parsed.difference_update_query(["busy_timeout"])
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, ""):
        raise DuroError(
            f"database URL {str(url)!r} names no SQLite file: {URL_HINT} "
            f"(an in-memory database cannot be shared by a worker and its clients)"
        )
    return parsed, options


def _busy_timeout_ms(raw: str | Sequence[str]) -> int:
    """The ``busy_timeout`` URL option: how long a SQLite statement waits for another process's
    write lock before it fails with "database is locked" (and the call with StoreUnavailable)."""
    if not isinstance(raw, str):
        raise DuroError(
            f"database URL option busy_timeout is given {len(raw)} times; give it once: {_BUSY_TIMEOUT_HINT}"
        )
    text = raw.strip()
    try:
        ms = int(text) if text.isascii() and text.isdigit() else to_ms(text, "busy_timeout")
    except DuroError:
        raise DuroError(
            f"database URL option busy_timeout={raw!r} is not a duration: {_BUSY_TIMEOUT_HINT}"
        ) from None
    if ms > _MAX_BUSY_TIMEOUT_MS:
        raise DuroError(f"database URL option busy_timeout={raw!r} is too long: {_BUSY_TIMEOUT_HINT}")
    return ms
