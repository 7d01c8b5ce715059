"""psycopg, PostgreSQL's driver, for the store code that handles its connections and errors. Until a
PostgreSQL URL is parsed it is the stand-in of ``duro._extras`` (every ``isinstance`` and
``except`` against it is false), so that a SQLite store loads no part of it."""

from __future__ import annotations

import sys
from typing import Any

from .._extras import PSYCOPG

driver: Any = PSYCOPG


def loaded() -> Any:
    """The driver if anything in this process loaded it (its errors can exist only then), else the
    stand-in: for code that classifies an error, which may meet one before any URL was parsed."""
    if driver is PSYCOPG and "psycopg" in sys.modules:
        load()
    return driver


def load() -> None:
    """The driver itself, from now on (``parse_database_url`` calls it for a PostgreSQL URL)."""
    global driver
    import psycopg
    import psycopg.errors
    import psycopg.pq

    driver = psycopg
