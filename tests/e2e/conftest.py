"""End-to-end fixtures: a copy of tests/e2e/project in a temporary directory, and a real
``duro dev`` process serving it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.devserver import DevServer, running_dev_server

PROJECT = Path(__file__).parent / "project"


@pytest.fixture
def e2e_project(tmp_path: Path) -> Path:
    """A fresh copy of the e2e project (its own .duro/dev.db)."""
    target = tmp_path / "project"
    shutil.copytree(PROJECT, target, ignore=shutil.ignore_patterns(".duro", "__pycache__"))
    return target


@pytest.fixture
def dev_server(e2e_project: Path) -> Iterator[DevServer]:
    """``duro dev`` on the e2e project, on a free port."""
    with running_dev_server(e2e_project) as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database several processes share: a SQLite file, and a fresh database of the real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    request.applymarker(pytest.mark.postgres)
    return request.getfixturevalue("postgres_url")
