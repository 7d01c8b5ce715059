"""Creating the schema (the tables of :mod:`._tables`) and migrating older ones, once per store."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .._errors import DuroError
from ._queries import COUNT_KEYS, QUERIES
from ._tables import ACTIVE_SQL, SCHEMA_VERSION, limit_keys, metadata, partial_on_postgresql


class Connector(Protocol):
    """What the schema needs of the store's connection (``._connection.Connector``)."""

    dialect: str
    engine: sa.Engine
    schema_ready: bool

    @property
    def safe_url(self) -> str: ...

    def lock_key(self, conn: Connection, key: str) -> None: ...

    def run(self, conn: Connection, name: str, params: Any) -> Any: ...

    def single_read(self) -> AbstractContextManager[Connection]: ...

    def schema_transaction(self) -> AbstractContextManager[Connection]: ...


# Schema migrations: MIGRATIONS[n](connection, dialect) upgrades version n to n + 1.
MIGRATIONS: dict[int, Callable[[Connection, str], None]] = {
    # 1 -> 2 adds duro_schedules, a new table: create_all (run just before) has made it already.
    1: lambda conn, dialect: None,
    # 2 -> 3 adds duro_limits and duro_slots: new tables as well.
    2: lambda conn, dialect: None,
    # 3 -> 4: partial indexes (see _tables.Run and _tables.SlotRequest); on PostgreSQL the claims'
    # index on (namespace, status, owner) gives way to duro_runs_active
    3: lambda conn, dialect: _recreate_indexes(
        conn,
        "duro_runs_quota",
        "duro_runs_parent",
        "duro_slots_due",
        "duro_slots_run",
        *(["duro_runs_active"] if dialect == "postgresql" else []),
        dropped=["duro_runs_claim"] if dialect == "postgresql" else [],
    ),
    # 4 -> 5: due work (see _tables.Run.due_at). Every unfinished run is due at once, and the runs of
    # workers that have no row any more go back: each is replayed once, and waits from there.
    4: lambda conn, dialect: _add_due_at(conn),
    # 5 -> 6: the starter's trace context, kept with the run (see _tables.Run.trace_context), and
    # ended slots indexed by their end (a limit's last hour)
    5: lambda conn, dialect: _schema_6(conn),
    # 6 -> 7: a run's cancel request (see _tables.Run.cancel_requested_at), and a quota's index also
    # orders a key's runs by their end (a refusal's retry estimate), and a limit's row keeps its
    # declared capacity and max hold (what a client engine lists)
    6: lambda conn, dialect: _schema_7(conn),
    # 7 -> 8: keyed limits: a slot's key, a keyed limit's slots indexed by key, a limit's declared
    # per_key (duro_limit_keys, the keys' overrides, is a new table: create_all makes it)
    7: lambda conn, dialect: _schema_8(conn),
    # 8 -> 9: a keyed limit's keys keep their counts (see _tables.LimitKeyRow), made from the slots
    8: lambda conn, dialect: _schema_9(conn),
    # 9 -> 10 adds rates (duro_rates, duro_rate_keys, duro_rate_waits): new tables, made by create_all
    9: lambda conn, dialect: None,
    # 10 -> 11: a rate's queue numbers its waiters and counts its grants (see _schema_11); its ended
    # waits indexed by their end
    10: lambda conn, dialect: _schema_11(conn),
    # 11 -> 12: runs listed newest first across namespaces, unfinished runs alone on both databases,
    # finished runs by their end (retention, prune, replay-check; see _tables.Run)
    11: lambda conn, dialect: _recreate_indexes(
        conn, "duro_runs_list", "duro_runs_active", "duro_runs_ended"
    ),
    # 12 -> 13: re-driven runs: a run's attempt and where a fork came from (duro_attempts and
    # duro_past_steps, new tables, are made by create_all)
    12: lambda conn, dialect: _schema_13(conn),
}


def _schema_13(conn: Connection) -> None:
    _add_column(conn, "duro_runs", "attempt", "INTEGER NOT NULL DEFAULT 1")
    _add_column(conn, "duro_runs", "forked_from", "VARCHAR(200)")
    _add_column(conn, "duro_runs", "forked_seq", "INTEGER")


def _schema_6(conn: Connection) -> None:
    _add_column(conn, "duro_runs", "trace_context", "VARCHAR(1024)")
    _recreate_indexes(conn, "duro_slots_ended")


def _schema_7(conn: Connection) -> None:
    _add_column(conn, "duro_runs", "cancel_requested_at", "BIGINT")
    _add_column(conn, "duro_runs", "recoveries", "INTEGER")
    _add_column(conn, "duro_runs", "recovered_steps", "INTEGER")
    _recreate_indexes(conn, "duro_runs_quota")
    _add_column(conn, "duro_limits", "capacity", "INTEGER")
    _add_column(conn, "duro_limits", "max_hold_ms", "BIGINT")


def _schema_8(conn: Connection) -> None:
    _add_column(conn, "duro_slots", "limit_key", "VARCHAR(200)")
    _add_column(conn, "duro_limits", "per_key", "INTEGER")
    _recreate_indexes(conn, "duro_slots_key_queue")


def _schema_9(conn: Connection) -> None:
    """duro_limit_keys made anew with the keys' counts: overrides kept, counts made from the slots."""
    kept = conn.execute(
        sa.text("SELECT limit_name, limit_key, capacity_override, updated_at FROM duro_limit_keys")
    ).fetchall()
    conn.execute(sa.text("DROP TABLE duro_limit_keys"))
    limit_keys.create(conn)
    _recreate_indexes(conn, "duro_slots_key_queue")
    for name, key, capacity, updated_at in kept:
        params = {"name": name, "key": key, "value": capacity, "now": updated_at}
        conn.execute(sa.text(QUERIES["key_override_set"]), params)
    keyed = conn.execute(sa.text("SELECT name, per_key FROM duro_limits WHERE per_key IS NOT NULL"))
    for name, per_key in keyed.fetchall():
        for query in COUNT_KEYS:
            conn.execute(sa.text(QUERIES[query]), {"name": name, "per_key": per_key, "now": 0})


def _add_column(conn: Connection, table: str, column: str, sql_type: str) -> None:
    if column not in {found["name"] for found in sa.inspect(conn).get_columns(table)}:
        conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}"))


def _add_due_at(conn: Connection) -> None:
    if "due_at" not in {column["name"] for column in sa.inspect(conn).get_columns("duro_runs")}:
        conn.execute(sa.text("ALTER TABLE duro_runs ADD COLUMN due_at BIGINT"))
    conn.execute(sa.text(f"UPDATE duro_runs SET due_at = updated_at WHERE status IN {ACTIVE_SQL}"))
    conn.execute(
        sa.text(
            "UPDATE duro_runs SET owner = NULL WHERE owner IS NOT NULL "
            "AND owner NOT IN (SELECT id FROM duro_workers)"
        )
    )
    _recreate_indexes(conn, "duro_runs_due", "duro_runs_owner")


def _schema_11(conn: Connection) -> None:
    """A queue numbers its own waiters and counts what it granted; a grant carries that count, and
    ends when it is granted: the windows' costs become index lookups."""
    _add_column(conn, "duro_rate_keys", "next_pos", "BIGINT NOT NULL DEFAULT 0")
    _add_column(conn, "duro_rate_keys", "granted_cum", "BIGINT NOT NULL DEFAULT 0")
    _add_column(conn, "duro_rate_waits", "cum", "BIGINT")
    for statement in (
        "UPDATE duro_rate_waits SET ended_at = granted_at WHERE state = 'granted' AND ended_at IS NULL",
        "UPDATE duro_rate_waits SET cum = (SELECT sum(g.cost) FROM duro_rate_waits AS g WHERE g.state = "
        "'granted' AND g.rate_name = duro_rate_waits.rate_name AND g.rate_key = duro_rate_waits.rate_key "
        "AND (g.granted_at < duro_rate_waits.granted_at OR (g.granted_at = duro_rate_waits.granted_at "
        "AND g.id <= duro_rate_waits.id))) WHERE state = 'granted'",
        "UPDATE duro_rate_keys SET granted_cum = COALESCE((SELECT max(w.cum) FROM duro_rate_waits AS w "
        "WHERE w.rate_name = duro_rate_keys.rate_name AND w.rate_key = duro_rate_keys.rate_key), 0), "
        "next_pos = COALESCE((SELECT max(w.pos) + 1 FROM duro_rate_waits AS w "
        "WHERE w.rate_name = duro_rate_keys.rate_name AND w.rate_key = duro_rate_keys.rate_key), 0)",
    ):
        conn.execute(sa.text(statement))
    _recreate_indexes(conn, "duro_rate_waits_ended", "duro_rate_waits_granted")


def _recreate_indexes(conn: Connection, *names: str, dropped: Iterable[str] = ()) -> None:
    """Drop indexes (``names`` and ``dropped``) and create ``names`` as the schema now defines them."""
    for name in dropped:
        conn.execute(sa.text(f"DROP INDEX IF EXISTS {name}"))
    for table in metadata.sorted_tables:
        for index in table.indexes:
            if index.name in names:
                conn.execute(sa.text(f"DROP INDEX IF EXISTS {index.name}"))
                index.create(conn)


def create_schema(db: Connector) -> None:
    """Create the tables, or migrate them to this version, in one transaction (on PostgreSQL under
    a lock, so that processes starting together do it once); then the store is ready."""
    if db.schema_ready:
        return
    if db.dialect == "postgresql":
        partial_on_postgresql()
    try:
        with db.schema_transaction() as conn:
            db.lock_key(conn, "duro:schema")  # first: on PostgreSQL it begins the transaction
            metadata.create_all(conn)
            row = db.run(conn, "schema_version", {}).fetchone()
            if row is None:
                db.run(conn, "schema_version_insert", {"value": str(SCHEMA_VERSION)})
            elif int(row[0]) < SCHEMA_VERSION:
                _migrate(db, conn, int(row[0]))
            elif int(row[0]) > SCHEMA_VERSION:
                raise DuroError(
                    f"the database at {db.safe_url} has duro schema version {row[0]}, newer than this "
                    f"duro's {SCHEMA_VERSION}: upgrade duro before using this database"
                )
    except sa.exc.OperationalError as err:
        raise DuroError(
            f"cannot open the database at {db.safe_url}: {err.orig}; check the URL, "
            f"that the server runs and that the file's folder is writable"
        ) from None
    db.schema_ready = True


def _migrate(db: Connector, conn: Connection, found: int) -> None:
    """Bring a database from schema version ``found`` up to ``SCHEMA_VERSION``, step by step, in
    the schema transaction. ``MIGRATIONS[n]`` upgrades version n to n + 1."""
    for version in range(found, SCHEMA_VERSION):
        step = MIGRATIONS.get(version)
        if step is None:
            raise DuroError(
                f"the database at {db.safe_url} has duro schema version {found} and this "
                f"duro has no migration from version {version}; use the duro that created it"
            )
        step(conn, db.dialect)
    db.run(conn, "schema_version_update", {"value": str(SCHEMA_VERSION)})


def check_readable(db: Connector) -> None:
    """For a read-only store: the schema must be this duro's version exactly (nothing is created or
    migrated); then the store is ready."""
    try:
        with db.engine.connect() as conn:  # not db.read(): that would create the schema first
            row = db.run(conn, "schema_version", {}).fetchone()
    except Exception as err:  # noqa: BLE001 - no such table, whichever driver says it
        cause = getattr(err, "orig", None) or err
        raise DuroError(
            f"the database at {db.safe_url} holds no duro schema ({' '.join(str(cause).split())[:200]}): "
            f"check the URL; a read-only check creates nothing"
        ) from None
    found = None if row is None else int(row[0])
    if found != SCHEMA_VERSION:
        newer = found is not None and found > SCHEMA_VERSION
        raise DuroError(
            f"the database at {db.safe_url} has duro schema version {found}, this duro reads version "
            f"{SCHEMA_VERSION} and a read-only check never migrates: "
            + (
                "use the duro version that wrote it"
                if newer
                else "start a worker or dev server of this version on it first (it migrates), or "
                "check it with the duro version that wrote it"
            )
        )
    db.schema_ready = True


def schema_version(db: Connector) -> int:
    with db.single_read() as conn:
        return int(db.run(conn, "schema_version", {}).fetchone()[0])
