"""The `duro` commands that run things against a project on disk (CliRunner: in-process, real SQLite
file): `duro run`, and what `duro dev`, `serve` and `worker` say when they cannot start."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from duro import Engine
from duro.tooling import SystemClock
from duro_devserver.cli import main

WORKFLOW = """
from duro import step, workflow

@step
async def shout(text: str) -> str:
    return text.upper()

@workflow
async def echo(text: str) -> str:
    return await shout(text)

@workflow
async def broken(text: str) -> str:
    raise ValueError("no")
"""


def project(tmp_path):
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "echo.py").write_text(WORKFLOW)
    return tmp_path


def test_run_prints_steps_and_result_and_json(tmp_path):
    root = project(tmp_path)
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    result = CliRunner().invoke(
        main, ["run", "echo", "--input", '"hi"', "--project", str(root), "--database-url", db]
    )
    assert result.exit_code == 0, result.output
    assert "completed" in result.output and 'result: "HI"' in result.output and "shout" in result.output
    result = CliRunner().invoke(
        main, ["run", "echo", "--input", '"x"', "--project", str(root), "--database-url", db, "--json"]
    )
    data = json.loads(result.output)
    assert (data["status"], data["output"], data["steps"][0]["name"]) == ("completed", "X", "shout")


def test_failures_and_bad_arguments_exit_non_zero_with_a_message(tmp_path):
    root = project(tmp_path)
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    failed = CliRunner().invoke(
        main, ["run", "broken", "--input", '"x"', "--project", str(root), "--database-url", db]
    )
    assert failed.exit_code == 1 and "ValueError: no" in failed.output
    unknown = CliRunner().invoke(main, ["run", "nope", "--project", str(root), "--database-url", db])
    assert unknown.exit_code == 2 and "unknown workflow 'nope'" in unknown.output
    bad_json = CliRunner().invoke(main, ["run", "echo", "--input", "{bad", "--project", str(root)])
    assert bad_json.exit_code == 2 and "--input is not JSON" in bad_json.output


# -- a newcomer's first hour: what `duro dev`, `serve` and `worker` say before anything runs ---------


def test_a_busy_port_says_so_and_to_pass_port(tmp_path):
    root = project(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for command in ("dev", "serve"):
            result = CliRunner().invoke(main, [command, str(root), "--port", str(port)])
            assert result.exit_code == 2, result.output
            assert result.stderr == (
                f"error: port {port} on 127.0.0.1 is in use (another `duro dev` or `duro "
                f"serve`?): stop that server, or pass --port N for another port (--port 0 "
                f"picks a free one)\n"
            )
            assert "Errno" not in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("command", ["dev", "serve", "worker"])
def test_a_file_that_is_not_a_sqlite_database_is_named_with_what_to_do(tmp_path, command):
    root = project(tmp_path)
    (root / ".duro").mkdir()
    db = root / ".duro" / "dev.db"
    db.write_text("these are not the runs you are looking for\n" * 100)
    result = CliRunner().invoke(
        main, [command, str(root), "--port", "0"] if command != "worker" else [command, str(root)]
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(
        f"error: {db} is not a usable SQLite database (file is not a database): "
        f"move it away (or delete it, losing the runs it held)"
    )
    assert "--database-url" in result.stderr and "Traceback" not in result.output
    assert result.stderr.count("\n") == 1


def test_the_former_unload_after_flag_is_evict_after_and_says_so(tmp_path):
    """``duro worker --unload-after`` still works as ``--evict-after`` (a bad value is refused under
    the new name), says it is the former name, and is left out of the help."""
    result = CliRunner().invoke(main, ["worker", str(project(tmp_path)), "--unload-after", "soon"])
    assert result.exit_code == 2, result.output
    first, second = result.stderr.splitlines()
    assert first == "duro worker: --unload-after is now --evict-after (the old name will be removed)"
    assert second.startswith("error: evict_after 'soon' is not understood")
    shown = CliRunner().invoke(main, ["worker", "--help"]).output
    assert "--evict-after" in shown and "--unload-after" not in shown


def test_the_readmes_say_how_to_put_duro_on_the_path(tmp_path):
    """README's "Start a project" begins by putting `duro` on the PATH (`make dev` installs it in
    .venv/bin), and so does the README of a scaffolded project."""
    repo = Path(__file__).resolve().parents[2]
    readme = (repo / "README.md").read_text()
    start = readme.split("## Start a project", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    first = start.strip().splitlines()[0]
    assert first.startswith("source .venv/bin/activate") and "PATH" in first
    assert "VENV ?= .venv" in (repo / "Makefile").read_text()
    created = CliRunner().invoke(main, ["init", str(tmp_path / "myapp")])
    assert created.exit_code == 0, created.output
    scaffolded = (tmp_path / "myapp" / "README.md").read_text()
    assert "`duro: command not found`?" in scaffolded and ".venv/bin/activate" in scaffolded


class TwoDaysAgo(SystemClock):
    """Real time, two days back: a run it finishes ended two days ago."""

    def now_ms(self) -> int:
        return super().now_ms() - 2 * 86_400_000


async def _finish_echo(root: Path, db: str, clock: SystemClock) -> None:
    engine = Engine.from_project(root, database_url=db, clock=clock)
    async with engine:
        handle = await engine.start("echo", "old")
        assert await handle.result() == "OLD"
    engine.close()


def test_replay_check_since_measures_from_the_real_clock(tmp_path):
    """The cutoff of --since is real time minus the duration, not the harness's simulated instant
    the check replays in."""
    root = project(tmp_path)
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    asyncio.run(_finish_echo(root, db, TwoDaysAgo()))

    def checked(since: str) -> str:
        result = CliRunner().invoke(main, ["replay-check", str(root), "--database-url", db, "--since", since])
        assert result.exit_code == 0, result.output
        return result.output

    assert "checked 1 run(s): all replay on this code" in checked("7d")
    assert "checked 0 run(s)" in checked("1d")
    asyncio.run(_finish_echo(root, db, SystemClock()))  # and one that ended just now
    assert "checked 1 run(s)" in checked("1d")
    assert "checked 2 run(s)" in checked("3d")


QUEUED = """
from duro import acquire_slot, release_slot, wait_for_signal, workflow

@workflow
async def hold(n: int) -> None:
    slot = await acquire_slot("line", label="holder")
    await wait_for_signal("done", timeout="1h")
    await release_slot(slot.id)

@workflow
async def call(n: int) -> str:
    slot = await acquire_slot("line", timeout="1h")
    await release_slot(slot.id)
    return f"called {n}"
"""


async def _until(check, what: str, seconds: float = 30) -> None:
    """A bounded wait on a condition."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.02)


async def test_run_says_where_it_waits_for_a_slot_each_time_that_changes(tmp_path):
    root = tmp_path / "calls"
    (root / "workflows").mkdir(parents=True)
    (root / "workflows" / "calls.py").write_text(QUEUED)
    (root / "duro.config.py").write_text(
        "from duro import define_workspace\n\n"
        'workspace = define_workspace(limits={"line": {"capacity": 1, "max_hold": "1h"}})\n'
    )
    db = f"sqlite:///{tmp_path / 'calls.db'}"
    engine = Engine.from_project(root, database_url=db)
    async with engine:  # one run holds the line, another queues for it; both stay in the store
        holder = await engine.start("hold", 0)
        first = await engine.start("call", 1)

        async def first_queued() -> bool:
            return (await engine.limits.queued_for([first.id])) == {first.id: "line"}

        await _until(first_queued, "the first call did not queue")
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "duro_devserver", "run", "call", "--input", "2"),
        *("--project", str(root), "--database-url", db),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None

        async def line() -> str:
            return (await asyncio.wait_for(proc.stderr.readline(), 30)).decode().rstrip("\n")

        said = await line()
        assert said.endswith(
            "waits for a slot of limit 'line' (capacity 1, 1 busy, 2 waiting): position 2 of 2"
        ), said
        await engine.cancel(first.id)  # the run ahead leaves the queue
        said = await line()
        assert said.endswith("(capacity 1, 1 busy, 1 waiting): position 1 of 1"), said
        (busy,) = [s for s in await engine.limits.slots("line") if s.state == "busy"]
        assert busy.run_id == holder.id
        await engine.limits.release(busy.id)  # the line frees: the run takes it and completes
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        engine.close()
    assert proc.returncode == 0, (out, err)
    assert 'result: "called 2"' in out.decode()
