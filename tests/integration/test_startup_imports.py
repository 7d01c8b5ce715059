"""An engine on SQLite loads SQLite's pieces only: after a run, a fresh interpreter has loaded no
psycopg, no SQLAlchemy PostgreSQL dialect, nothing of the dev server, no metrics or tracing library
and no cron parser (a schedule loads it)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

UNUSED = (
    "psycopg",
    "sqlalchemy.dialects.postgresql",
    "starlette",
    "uvicorn",
    "prometheus_client",
    "opentelemetry",
    "croniter",
    "duro_devserver",
)


def test_an_engine_on_sqlite_loads_no_postgresql_piece(tmp_path: Path):
    script = textwrap.dedent(
        f"""
        import asyncio, json, sys
        from duro import Engine, step, workflow

        @step
        async def double(n: int) -> int:
            return 2 * n

        @workflow
        async def twice(n: int) -> int:
            return await double(n)

        async def main():
            engine = Engine("sqlite:///{tmp_path}/light.db")
            engine.register(twice)
            async with engine:
                run = await engine.start(twice, 21)
                assert await run.result(timeout=30) == 42
            engine.close()

        asyncio.run(main())
        print(json.dumps([name for name in {UNUSED!r} if name in sys.modules]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
