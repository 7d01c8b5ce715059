"""A read-only store (what ``duro replay-check`` and ``duro runs export`` open) changes nothing, on
both stores: an empty database is refused, not given a schema; one of this version is read, and a
write through it is refused by the database itself."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from duro import DuroError
from duro.store import SqlStore
from tests.integration.store_contract._support import new_run


def _tables(url: str) -> set[str]:
    engine = sa.create_engine(SqlStore(url).url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_an_empty_database_is_refused_and_left_empty(database_url: str):
    if database_url.startswith("sqlite"):
        path = database_url.removeprefix("sqlite:///")
        open(path, "wb").close()  # an empty file: SQLite's empty database
    with pytest.raises(DuroError, match="holds no duro schema"):
        SqlStore(database_url, read_only=True)
    assert not {t for t in _tables(database_url) if t.startswith("duro_")}


def test_a_read_only_store_reads_and_cannot_write(database_url: str):
    writer = SqlStore(database_url)
    writer.runs.insert(new_run("r1"), None)
    writer.close()
    reader = SqlStore(database_url, read_only=True)
    try:
        assert reader.runs.get("r1") is not None
        with pytest.raises(Exception, match="(?i)read-only|readonly"):
            reader.runs.insert(new_run("r2"), None)
    finally:
        reader.close()
    check = SqlStore(database_url)
    try:
        assert check.runs.get("r2") is None
    finally:
        check.close()
