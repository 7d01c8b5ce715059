"""Shared fixtures: a fresh SQLite file per test, and a real PostgreSQL server for the run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from duro_harness import DuroEnv
from duro_harness.plugin import _find_project
from tests.support.pgserver import PgServer, start_server

pytest_plugins = ["pytester"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that needs the PostgreSQL server carries the ``postgres`` marker (``make test-fast``
    leaves them out with ``-m "not postgres"``): those marked by hand, the ``[postgres]`` case of
    ``database_url``, and those asking for ``pg_server`` (or ``postgres_url``) as a fixture."""
    for item in items:
        if "pg_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    server = start_server()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'duro.db'}"


@pytest.fixture
def postgres_url(pg_server: PgServer) -> Iterator[str]:
    name = pg_server.create_database()
    try:
        yield pg_server.url(name)
    finally:
        pg_server.drop_database(name)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str:
    """Each test using it runs on a fresh SQLite file and on a fresh database of the real PostgreSQL."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture(params=["resident", "evicted"])
def duro_env(request: pytest.FixtureRequest) -> Any:
    """The harness plugin's ``duro_env``, twice: waiting runs resident (the harness's default), and
    every waiting run evicted at once and replayed from the store when its wait ends
    (``max_resident_runs=0``, what a production worker does with runs that wait long): a test
    passes only if both take the same course."""
    marker = request.node.get_closest_marker("duro")
    options = dict(marker.kwargs) if marker is not None else {}
    project = options.pop("project", None)
    project = Path(request.config.rootpath) / project if project is not None else _find_project(request)
    options.setdefault("max_resident_runs", 0 if request.param == "evicted" else 10_000)
    return DuroEnv(project=project, **options)
