"""An independent database connection for samplers (not through duro)."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
from sqlalchemy.engine import make_url


def connect(url: str) -> Any:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return sqlite3.connect(parsed.database, isolation_level=None, check_same_thread=False)
    return psycopg.connect(
        parsed.set(drivername="postgresql").render_as_string(hide_password=False), autocommit=True
    )
