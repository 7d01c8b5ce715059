"""Rows a corrupt disk or a hostile writer left in the store, read by a real ``duro dev`` process
(SQLite): an error row naming ``SystemExit`` or ``KeyboardInterrupt`` is never rebuilt into one (a
run replaying such a failed step fails, and the server goes on), and a row that is not duro's JSON
makes one field unreadable, not ``GET /api/runs`` a 500."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import textwrap
from pathlib import Path

from duro.store import SqlStore
from tests.integration.store_contract._support import new_run
from tests.support.devserver import running_dev_server
from tests.support.waiting import wait_until

FLOWS = """
from duro import step, workflow


@step
async def charge(n: int) -> int:
    return n


@workflow(name="billing")
async def billing(n: int) -> int:
    return await charge(n)
"""


def _error_row(qualname: str) -> str:
    return json.dumps(
        {
            "type": f"builtins.{qualname}",
            "module": "builtins",
            "qualname": qualname,
            "message": "0",
            "traceback": "",
            "state": {"args": [{"value": 0}], "attributes": {}},
        }
    )


def test_hostile_rows_neither_stop_the_server_nor_break_a_page(tmp_path: Path):
    project = tmp_path / "project"
    (project / "workflows").mkdir(parents=True)
    (project / "workflows" / "flows.py").write_text(textwrap.dedent(FLOWS))
    url = f"sqlite:///{tmp_path / 'duro.db'}"
    store = SqlStore(url)
    store.create_schema()
    for run_id in ("exits", "interrupts"):  # unfinished, with a failed step to replay
        store.runs.insert(dataclasses.replace(new_run(run_id, workflow="billing"), input="1"), None)
    store.close()
    with sqlite3.connect(tmp_path / "duro.db") as db:
        for run_id, qualname in (("exits", "SystemExit"), ("interrupts", "KeyboardInterrupt")):
            db.execute(
                "INSERT INTO duro_steps (run_id, seq, kind, name, status, started_at, ended_at, error) "
                "VALUES (?, 0, 'step', 'charge', 'failed', 1000, 1001, ?)",
                (run_id, _error_row(qualname)),
            )
        # as left by a worker that died: running, unowned, due; its replay meets the failed step
        db.execute("UPDATE duro_runs SET status = 'running' WHERE id IN ('exits', 'interrupts')")
        db.execute(
            "INSERT INTO duro_runs (id, namespace, workflow, version, status, input, output, error, "
            "tags, created_at, updated_at, ended_at) VALUES ('garbled', 'default', 'billing', '1', "
            "'failed', '{not json', 'nor this', '<html>oops</html>', 'not a list', 1000, 1001, 1001)"
        )
    with running_dev_server(project, args=("--database-url", url)) as server, server.client() as client:

        def ended() -> bool:
            runs = client.get("/api/runs").json()["runs"]
            return {r["id"]: r["status"] for r in runs}.get("exits") == "failed" and {
                r["id"]: r["status"] for r in runs
            }.get("interrupts") == "failed"

        wait_until(ended, 30, "both hostile replays to fail their runs")
        assert server.process.poll() is None, "the dev server exited"
        listed = client.get("/api/runs")
        assert listed.status_code == 200, listed.text
        garbled = client.get("/api/runs/garbled")
        assert garbled.status_code == 200, garbled.text
        body = garbled.json()["run"]
        assert body["error"]["type"] == "duro_unreadable"
        assert body["input"] == {"duro_unreadable": "{not json"}
        exits = client.get("/api/runs/exits").json()["run"]
        assert "builtins.SystemExit" in exits["error"]["message"]
        started = client.post("/api/workflows/billing/runs", json={"input": 5})  # still serving
        assert started.status_code == 201, started.text
