"""Fixed SQL run on the driver's connection: written once with ``:name`` parameters (sqlite3's
style), turned into ``%(name)s`` for psycopg."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.engine import Connection

try:
    import psycopg
    from psycopg.pq import TransactionStatus
except ModuleNotFoundError:  # no postgres extra: SQLite only (parse_database_url says which to install)
    from .._extras import PSYCOPG as psycopg  # type: ignore[no-redef]

_NAMED = re.compile(r"(?<![:\w]):(\w+)")


def for_dialect(sql: str, dialect: str) -> str:
    return sql if dialect == "sqlite" else _NAMED.sub(r"%(\1)s", sql)


def raw_execute(conn: Connection, sql: str, params: Any) -> Any:
    """Run ``sql`` on the driver connection under ``conn``, inside its transaction.

    psycopg opens a transaction with a ``BEGIN`` of its own, answered before the first statement is
    sent: a round trip for nothing. When this statement is the transaction's first, the two go in
    one pipeline (one round trip; the results are in the cursor when the pipeline ends)."""
    driver = conn.connection.driver_connection
    if (
        isinstance(driver, psycopg.Connection)
        and not driver.autocommit
        and driver.info.transaction_status == TransactionStatus.IDLE
    ):
        with driver.pipeline():
            return driver.execute(sql, params)
    return driver.execute(sql, params)  # type: ignore[union-attr]
