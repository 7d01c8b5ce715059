"""Fixed SQL run on the driver's connection: written once with ``:name`` parameters (sqlite3's
style), turned into ``%(name)s`` for psycopg."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.engine import Connection

_NAMED = re.compile(r"(?<![:\w]):(\w+)")


def for_dialect(sql: str, dialect: str) -> str:
    return sql if dialect == "sqlite" else _NAMED.sub(r"%(\1)s", sql)


def raw_execute(conn: Connection, sql: str, params: Any) -> Any:
    """Run ``sql`` on the driver connection under ``conn``, inside its transaction."""
    return conn.connection.driver_connection.execute(sql, params)  # type: ignore[union-attr]
