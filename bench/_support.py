"""What the benchmark scripts share: scratch directories and a fresh database per case."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def export_tree(commit: str, paths: list[str], dest: Path) -> None:
    """``paths`` of ``commit`` written under ``dest`` (git archive), to measure that commit's code."""
    root = Path(__file__).resolve().parents[1]
    archive = subprocess.run(
        ["git", "archive", commit, *paths], cwd=root, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A temporary directory for one database, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=f"duro-bench-{prefix}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Stores:
    """A fresh database per case: a SQLite file in its own temporary directory, or a new database on
    the PostgreSQL server the script started (tests/support/pgserver.py)."""

    prefix = "bench"

    def __init__(self, pg: Any) -> None:
        self.pg = pg

    @contextlib.contextmanager
    def database(self, store: str) -> Iterator[dict]:
        if store == "sqlite":
            with scratch(self.prefix) as tmp:
                path = str(tmp / "bench.db")
                yield {"url": f"sqlite:///{path}", "path": path}
        else:
            name = self.pg.create_database()
            try:
                url = self.pg.url(name)
                yield {"url": url, "dsn": url.replace("postgresql+psycopg://", "postgresql://")}
            finally:
                self.pg.drop_database(name)


def start_postgres(skip: bool) -> Any:
    """The real PostgreSQL server for a benchmark run (tests/support/pgserver.py), or None when
    skipped or unavailable (the script then measures SQLite alone and says why)."""
    if skip:
        return None
    from tests.support.pgserver import start_server

    try:
        return start_server()
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        print(f"PostgreSQL unavailable ({err}); measuring SQLite only", file=sys.stderr)
        return None
