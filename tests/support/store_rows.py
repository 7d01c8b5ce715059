"""What a store holds, read straight from its tables: a test compares it before and after a request
that must change nothing."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

# every table of duro's but duro_workers (heartbeats change on their own) and duro_meta (the schema)
TABLES = ("duro_runs", "duro_steps", "duro_signals", "duro_slots", "duro_limits", "duro_schedules")


def store_rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of duro's tables but the workers' heartbeats, in a stable order."""
    db = sa.create_engine(url.split("?")[0])
    try:
        with db.connect() as conn:
            return {
                table: sorted((tuple(r) for r in conn.execute(sa.text(f"SELECT * FROM {table}"))), key=repr)
                for table in TABLES
            }
    finally:
        db.dispose()


def run_statuses(url: str, run_ids: list[str]) -> dict[str, str]:
    """Each run's status, through a store of its own (what a test watching worker processes reads)."""
    from duro.store import SqlStore

    store = SqlStore(url)
    try:
        return store.runs.statuses(run_ids)
    finally:
        store.close()
