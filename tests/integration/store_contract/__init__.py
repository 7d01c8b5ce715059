"""The store contract: one suite that every implementation of ``duro.store.Store`` passes.

Its tests use the protocol only (the typed commands through ``tests.support.store_ops``), never a
store's internals; what varies between stores they read from the protocol's attributes
(``notifies``, ``batches``). ``tests/integration/test_store_contract.py`` runs it on SQLite and on
PostgreSQL. To run it against another store, subclass :class:`StoreContract` in a test module and
give it a ``make_store`` fixture:

    class TestMyStore(StoreContract):
        @pytest.fixture
        def make_store(self, tmp_path):
            return lambda: MyStore(tmp_path / "db")

``make_store()`` returns a new store object on the same fresh database each time it is called
(a test may open a second one, as a second process would). The stores it makes must trust the
``now`` each call passes (``SqlStore(..., decisions_clock="caller")``): the tests drive time.
``StoreContract`` provides the ``store`` fixture (one of them, its schema created, closed after).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from duro.store import Store

from .claims import ClaimsContract
from .runs import RunsContract
from .slots import SlotsContract
from .steps import StepsContract


class StoreContract(RunsContract, StepsContract, ClaimsContract, SlotsContract):
    """Every test of the contract; a subclass named ``Test...`` with a ``make_store`` fixture runs them."""

    @pytest.fixture
    def store(self, make_store: Callable[[], Store]) -> Iterator[Store]:
        store = make_store()
        store.create_schema()
        yield store
        store.close()


__all__ = ["StoreContract"]
