"""``duro replay-check`` and ``duro runs export`` against a real project with runs in flight: an
incompatible edit exits 1 naming each run and the seq, a compatible one exits 0, and no step body
runs (the effect log shows none)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from duro import Engine
from duro_harness import simulated

WORKFLOW = """
    import os
    from duro import step, wait_for_signal, workflow

    def effect(line):
        with open(os.environ["EFFECT_LOG"], "a") as log:
            log.write(line + "\\n")

    @step
    def reserve(n: int) -> int:
        effect(f"reserve {{n}}")
        return n + 1

    @step
    def {second}(n: int) -> int:
        effect(f"{second} {{n}}")
        return n * 10

    @workflow
    async def order(n: int) -> int:
        held = await {first}(n)
        await wait_for_signal("ship", timeout="1d")
        {after}
        return held
"""


def write_code(project: Path, first: str = "reserve", second: str = "charge", after: str = "pass") -> None:
    code = textwrap.dedent(WORKFLOW.format(first=first, second=second, after=after))
    (project / "workflows" / "orders.py").write_text(code)


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "shop"
    (root / "workflows").mkdir(parents=True)
    (root / "duro.config.py").write_text(
        "from duro import define_workspace\n\nworkspace = define_workspace()\n"
    )
    write_code(root)
    monkeypatch.setenv("EFFECT_LOG", str(tmp_path / "effects.log"))
    return root


def duro(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "duro_devserver", *args], capture_output=True, text=True, timeout=120
    )


async def in_flight(project: Path, url: str, n: int) -> list[str]:
    """``n`` runs of the original code, each waiting for "ship" after its first step."""
    engine = Engine.from_project(project, database_url=url)
    async with engine:
        handles = [await engine.start("order", i) for i in range(n)]
        deadline = asyncio.get_running_loop().time() + 30
        for handle in handles:  # a bounded wait on the condition
            while await handle.status() != "suspended":
                assert asyncio.get_running_loop().time() < deadline, "the runs did not reach their wait"
                await asyncio.sleep(0.01)
    engine.close()
    return [h.id for h in handles]


async def test_replay_check_exits_1_on_an_incompatible_edit_and_0_on_a_compatible_one(project, tmp_path):
    url = f"sqlite:///{tmp_path}/shop.db"
    runs = await in_flight(project, url, 3)
    log = tmp_path / "effects.log"
    before = log.read_text().splitlines()
    assert sorted(before) == ["reserve 0", "reserve 1", "reserve 2"]

    write_code(project, after="await charge(held)")  # appended after the wait: compatible
    ok = duro("replay-check", str(project), "--database-url", url)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "checked 3 run(s): all replay on this code" in ok.stdout

    write_code(project, first="charge")  # another step where reserve was recorded: incompatible
    bad = duro("replay-check", str(project), "--database-url", url)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    for run_id in runs:
        assert f"run {run_id} (order, version 1) diverges at seq 0" in bad.stdout
    assert "recorded step 'reserve'" in bad.stdout and "step 'charge'" in bad.stdout
    report = json.loads(duro("replay-check", str(project), "--database-url", url, "--json").stdout)
    assert report["checked"] == 3 and sorted(d["run_id"] for d in report["diverged"]) == sorted(runs)
    assert {(d["seq"], d["workflow"]) for d in report["diverged"]} == {(0, "order")}

    assert log.read_text().splitlines() == before  # the checks ran no step body


async def test_an_exported_history_replays_in_the_harness(project, tmp_path):
    url = f"sqlite:///{tmp_path}/shop.db"
    (run_id,) = await in_flight(project, url, 1)
    out = tmp_path / "order.json"
    exported = duro(
        "runs", "export", run_id, "--project", str(project), "--database-url", url, "-o", str(out)
    )
    assert exported.returncode == 0, exported.stderr
    history = json.loads(out.read_text())
    assert history["run"]["id"] == run_id and [s["name"] for s in history["steps"]][:1] == ["reserve"]
    write_code(project, first="charge")
    async with simulated(project) as env:
        outcome = await env.replay(out)
    assert outcome.diverged and (outcome.run_id, outcome.seq) == (run_id, 0)
    missing = duro("runs", "export", "no-such-run", "--project", str(project), "--database-url", url)
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_a_bad_since_is_a_usage_error(project):
    done = duro("replay-check", str(project), "--since", "soon")
    assert done.returncode == 2 and "--since" in done.stderr


FAILING = """
    from pydantic import BaseModel
    from duro import step, wait_for_signal, workflow

    class Order(BaseModel):
        n: int
        {field}

    @step
    def reserve(n: int) -> int:
        raise ValueError(f"no stock for {{n}}")

    @workflow
    async def order(inp: Order) -> int:
        try:
            await reserve(inp.n)
        except ValueError:
            {handler}
        await wait_for_signal("ship", timeout="1d")
        return inp.n
"""


def write_failing(project: Path, field: str = "", handler: str = "pass") -> None:
    code = textwrap.dedent(FAILING.format(field=field, handler=handler))
    (project / "workflows" / "orders.py").write_text(code)


async def failed_in_flight(project: Path, url: str) -> str:
    """A run whose step failed (caught by the code), waiting for "ship"."""
    write_failing(project)
    engine = Engine.from_project(project, database_url=url)
    async with engine:
        handle = await engine.start("order", {"n": 7})
        deadline = asyncio.get_running_loop().time() + 30
        while await handle.status() != "suspended":  # a bounded wait on the condition
            assert asyncio.get_running_loop().time() < deadline, "the run did not reach its wait"
            await asyncio.sleep(0.01)
    engine.close()
    return handle.id


async def test_a_replayed_failure_matches_only_the_recorded_error(project, tmp_path):
    url = f"sqlite:///{tmp_path}/shop.db"
    run_id = await failed_in_flight(project, url)
    same = duro("replay-check", str(project), "--database-url", url)
    assert same.returncode == 0, same.stdout + same.stderr  # the recorded ValueError, raised again

    write_failing(project, handler="None.nope  # new code that breaks where the failure is handled")
    broken = duro("replay-check", str(project), "--database-url", url)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert f"run {run_id}" in broken.stdout and "AttributeError" in broken.stdout
    assert "builtins.ValueError: no stock for 7" in broken.stdout  # what the history recorded

    write_failing(project, field="sku: str  # a field the stored input lacks")
    refitted = duro("replay-check", str(project), "--database-url", url)
    assert refitted.returncode == 1, refitted.stdout + refitted.stderr
    assert "ValidationError" in refitted.stdout


def test_a_path_that_does_not_exist_is_refused_and_not_created(project, tmp_path):
    missing = tmp_path / "typo" / "shop.db"
    done = duro("replay-check", str(project), "--database-url", f"sqlite:///{missing}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "there is no SQLite database" in done.stderr and str(missing) in done.stderr
    assert not missing.exists() and not missing.parent.exists()
    exported = duro(
        "runs", "export", "r1", "--project", str(project), "--database-url", f"sqlite:///{missing}"
    )
    assert exported.returncode == 2 and not missing.exists()


async def test_a_schema_of_another_version_is_refused_and_never_migrated(project, tmp_path):
    url = f"sqlite:///{tmp_path}/shop.db"
    await in_flight(project, url, 1)
    with sqlite3.connect(tmp_path / "shop.db") as db:
        db.execute("UPDATE duro_meta SET value = '6' WHERE key = 'schema_version'")
    done = duro("replay-check", str(project), "--database-url", url)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "schema version 6" in done.stderr and "never migrates" in done.stderr
    with sqlite3.connect(tmp_path / "shop.db") as db:
        assert db.execute("SELECT value FROM duro_meta WHERE key = 'schema_version'").fetchone() == ("6",)
