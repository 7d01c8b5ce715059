"""A real PostgreSQL server for the test run, started from Debian's binaries.

PostgreSQL refuses to run as root, so when the tests run as root the server is initialised and
started as the ``postgres`` user, with its data directory under /tmp. fsync is off: the tests
exercise duro's logic, not the disk.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg


def dsn(url: str) -> str:
    """A store URL (``postgresql+psycopg://...``) as psycopg's own connection string."""
    return url.replace("postgresql+psycopg://", "postgresql://")


def find_bindir() -> Path | None:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    for candidate in reversed(candidates):
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class PgServer:
    bindir: Path
    base: Path
    port: int
    as_user: list[str]
    # synchronous_commit: off (the default, for speed) lets a crash (an ``immediate`` stop) lose the
    # last commits already acknowledged to clients; on keeps every acknowledged commit. fsync stays
    # off either way: the tests crash the server, never the machine, so written WAL survives.
    durable: bool = False
    # fsync and full_page_writes on as well (off by default): every commit on the disk, for the
    # benchmarks that measure PostgreSQL at full durability; no test needs it
    fsync: bool = False

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, timeout=120)

    def create_database(self) -> str:
        name = f"duro_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _pg_ctl(self, action: str, *args: str) -> None:
        """``pg_ctl ACTION`` on this server's data directory, waiting (60 s at most) until done."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.base / "data"), *args, "-w", "-t", "60", action)

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("stop", "-m", mode)

    def start(self) -> None:
        synced = "on" if self.fsync else "off"
        options = (
            f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync={synced} "
            f"-c synchronous_commit={'on' if self.durable else 'off'} -c full_page_writes={synced} "
            f"-c max_connections=300"
        )
        self._pg_ctl("start", "-l", str(self.base / "log"), "-o", options)

    def restart(self, mode: str = "fast", down: float = 0.0) -> None:
        """``pg_ctl restart``: stop (``fast`` disconnects every client; ``immediate`` is a crash that
        recovers from the WAL) and start again with the options of the running server, on the same
        port. Clients see their connections drop and new ones refused until it is up again.
        ``down`` > 0 keeps the server stopped that many seconds before starting it again."""
        if down > 0:
            self.stop(mode)
            threading.Event().wait(down)
            self.start()
            return
        self._pg_ctl("restart", "-l", str(self.base / "log"), "-m", mode)

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


def start_server(durable: bool = False, fsync: bool = False) -> PgServer:
    """A fresh server in a temporary directory; ``durable`` for tests that crash it and count on
    every acknowledged commit (see ``PgServer.durable``), ``fsync`` too for a server as durable as
    PostgreSQL's defaults (see ``PgServer.fsync``)."""
    bindir = find_bindir()
    if bindir is None:
        raise RuntimeError(
            "PostgreSQL's binaries are not installed: run `apt-get install -y postgresql` "
            "(scripts/install-system-deps.sh does it), then run the tests again"
        )
    base = Path(tempfile.mkdtemp(prefix="duro-pg-", dir="/tmp"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    server = PgServer(
        bindir=bindir, base=base, port=_free_port(), as_user=as_user, durable=durable, fsync=fsync
    )
    server._run(
        str(bindir / "initdb"),
        "-D",
        str(base / "data"),
        "-A",
        "trust",
        "-U",
        "postgres",
        "-E",
        "UTF8",
        "--no-sync",
    )
    server.start()
    return server
