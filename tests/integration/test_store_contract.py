"""The store contract (``tests/integration/store_contract``) run on SqlStore: on a fresh SQLite file
and on a fresh database of the real PostgreSQL."""

from __future__ import annotations

import pytest

from duro.store import SqlStore
from tests.integration.store_contract import StoreContract


class TestSqlStore(StoreContract):
    @pytest.fixture
    def make_store(self, database_url):
        return lambda: SqlStore(database_url, decisions_clock="caller")  # the tests pass every instant
