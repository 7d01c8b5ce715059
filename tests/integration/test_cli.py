"""The `duro run` command against a project on disk (CliRunner: in-process, real SQLite file)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from duro_devserver.cli import main

WORKFLOW = '''
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
'''


def project(tmp_path):
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "echo.py").write_text(WORKFLOW)
    return tmp_path


def test_run_prints_steps_and_result_and_json(tmp_path):
    root = project(tmp_path)
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    result = CliRunner().invoke(main, ["run", "echo", "--input", '"hi"', "--project", str(root), "--database-url", db])
    assert result.exit_code == 0, result.output
    assert "completed" in result.output and 'result: "HI"' in result.output and "shout" in result.output
    result = CliRunner().invoke(main, ["run", "echo", "--input", '"x"', "--project", str(root), "--database-url", db,
                                       "--json"])
    data = json.loads(result.output)
    assert (data["status"], data["output"], data["steps"][0]["name"]) == ("completed", "X", "shout")


def test_failures_and_bad_arguments_exit_non_zero_with_a_message(tmp_path):
    root = project(tmp_path)
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    failed = CliRunner().invoke(main, ["run", "broken", "--input", '"x"', "--project", str(root), "--database-url", db])
    assert failed.exit_code == 1 and "ValueError: no" in failed.output
    unknown = CliRunner().invoke(main, ["run", "nope", "--project", str(root), "--database-url", db])
    assert unknown.exit_code == 2 and "unknown workflow 'nope'" in unknown.output
    bad_json = CliRunner().invoke(main, ["run", "echo", "--input", "{bad", "--project", str(root)])
    assert bad_json.exit_code == 2 and "--input is not JSON" in bad_json.output
