"""psycopg, PostgreSQL's driver, for the store code that handles its connections and errors. Until a
PostgreSQL URL is parsed it is the stand-in of ``duro._extras`` (every ``isinstance`` and
``except`` against it is false), so that a SQLite store loads no part of it."""

from __future__ import annotations

from typing import Any

from .._extras import PSYCOPG

driver: Any = PSYCOPG


def load() -> None:
    """The driver itself, from now on (``parse_database_url`` calls it for a PostgreSQL URL)."""
    global driver
    import psycopg
    import psycopg.errors
    import psycopg.pq

    driver = psycopg
