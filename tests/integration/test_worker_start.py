"""A worker (``duro worker``, ``duro serve``) that starts while its PostgreSQL restarts waits for the
database, as a running worker's store calls do, instead of exiting with a traceback."""

from __future__ import annotations

import threading

import pytest

from duro.store import SqlStore
from duro_devserver.cli_server import open_store
from tests.support.pgserver import start_server
from tests.support.waiting import wait_until


@pytest.mark.postgres
def test_opening_the_store_waits_while_postgresql_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    server = start_server()
    try:
        url = server.url(server.create_database())
        failed: list[BaseException] = []
        real = SqlStore.create_schema

        def counted(self: SqlStore) -> None:
            try:
                real(self)
            except Exception as err:
                failed.append(err)
                raise

        monkeypatch.setattr(SqlStore, "create_schema", counted)
        server.stop("immediate")
        outcome: list[BaseException | None] = []

        def start() -> None:
            try:
                open_store(url)
                outcome.append(None)
            except BaseException as err:  # noqa: BLE001 - the test reports it
                outcome.append(err)

        opener = threading.Thread(target=start)
        opener.start()
        try:
            wait_until(lambda: len(failed) >= 2, 20, "attempts while the server is down")
        finally:
            server.start()
        opener.join(40)
        assert not opener.is_alive() and outcome == [None], outcome
        assert failed, "no attempt failed: the server was up before the first one"
    finally:
        server.stop()
