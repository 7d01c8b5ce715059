"""The `duro` commands that run things against a project on disk (CliRunner: in-process, real SQLite
file): `duro run`, and what `duro dev`, `serve` and `worker` say when they cannot start."""

from __future__ import annotations

import asyncio
import json
import socket
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
