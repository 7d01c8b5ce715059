"""Which installation a CLI command talks to: the project's dev server, an agent URL, or a named agent."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from duro_devserver.cli import main
from duro_devserver.client import TargetError, agents_file_path, resolve_target


def write_server_json(project: Path, **info) -> Path:
    (project / ".duro").mkdir(parents=True, exist_ok=True)
    path = project / ".duro" / "server.json"
    info = {"url": "http://127.0.0.1:8787", "pid": 1234, "token_required": False, **info}
    path.write_text(json.dumps(info))
    return path


def write_agents(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "agents.toml"
    path.write_text(text)
    return {"DURO_AGENTS_FILE": str(path)}


def error_of(project: Path, agent: str | None, env: dict[str, str]) -> TargetError:
    with pytest.raises(TargetError) as caught:
        resolve_target(project, agent, env)
    return caught.value


# -- the project's dev server ----------------------------------------------------------------------


def test_the_dev_server_comes_from_the_projects_server_json(tmp_path):
    server_file = write_server_json(tmp_path, url="http://127.0.0.1:9911/")
    target = resolve_target(tmp_path, None, {})
    assert (target.url, target.token, target.pid) == ("http://127.0.0.1:9911", None, 1234)
    assert target.server_file == server_file and target.project == tmp_path.resolve()
    assert target.description == "the dev server at http://127.0.0.1:9911"
    assert target.unreachable_hint == f"is `duro dev` running in {tmp_path.resolve()}?"


def test_the_dev_servers_token_comes_from_duro_token(tmp_path):
    write_server_json(tmp_path, token_required=True)
    assert resolve_target(tmp_path, None, {"DURO_TOKEN": "s3cret"}).token == "s3cret"
    assert resolve_target(tmp_path, None, {"DURO_TOKEN": ""}).token is None


def test_a_relative_project_resolves_from_the_working_directory(tmp_path, monkeypatch):
    write_server_json(tmp_path / "proj")
    monkeypatch.chdir(tmp_path)
    assert resolve_target(Path("proj"), None, {}).project == tmp_path.resolve() / "proj"


def test_no_server_json_says_how_to_start_one_and_exits_3(tmp_path):
    err = error_of(tmp_path, None, {})
    root = tmp_path.resolve()
    assert str(err) == (
        f"no dev server found for {root} ({root}/.duro/server.json is missing): "
        f"start one with `duro dev {root}`, or pass --agent URL"
    )
    assert err.exit_code == 3


def test_no_server_here_names_a_server_running_for_a_project_below(tmp_path):
    """At a checkout's root while `duro dev examples/voice` serves: which project's server runs,
    and how to reach it."""
    project = tmp_path / "examples" / "voice"
    (project / ".duro").mkdir(parents=True)
    (project / ".duro" / "server.json").write_text(
        json.dumps({"url": "http://127.0.0.1:8787", "pid": os.getpid()}), encoding="utf-8"
    )
    gone = tmp_path / "examples" / "stopped"
    (gone / ".duro").mkdir(parents=True)
    (gone / ".duro" / "server.json").write_text(json.dumps({"url": "http://127.0.0.1:9999", "pid": 0}))
    err = error_of(tmp_path, None, {})
    root = tmp_path.resolve()
    assert str(err) == (
        f"no dev server found for {root} ({root}/.duro/server.json is missing); a dev server of "
        f"project {root}/examples/voice is running at http://127.0.0.1:8787: pass --project "
        f"examples/voice (or run the command in examples/voice), or --agent http://127.0.0.1:8787; "
        f"or start one with `duro dev {root}`, or pass --agent URL"
    )
    assert err.exit_code == 3


def test_a_project_that_is_not_a_directory(tmp_path):
    err = error_of(tmp_path / "nope", None, {})
    assert "is not a directory" in str(err) and "--project DIR" in str(err) and err.exit_code == 3


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"pid": 3}', '{"url": "127.0.0.1:8787"}'])
def test_a_malformed_server_json_is_named(tmp_path, content):
    write_server_json(tmp_path)
    (tmp_path / ".duro" / "server.json").write_text(content)
    err = error_of(tmp_path, None, {})
    assert str(tmp_path / ".duro" / "server.json") in str(err) and err.exit_code == 3


# -- --agent URL ---------------------------------------------------------------------------------------


def test_an_agent_url_is_used_as_is_with_duro_token(tmp_path):
    target = resolve_target(tmp_path, "https://duro.example.com:8443/", {"DURO_TOKEN": "t"})
    assert (target.url, target.token) == ("https://duro.example.com:8443", "t")
    assert target.description == "the server at https://duro.example.com:8443" and target.pid is None


def test_an_agent_url_ignores_the_project(tmp_path):
    assert resolve_target(tmp_path / "missing", "http://10.0.0.5:8787", {}).url == "http://10.0.0.5:8787"


def test_an_agent_url_without_a_host_is_a_bad_argument(tmp_path):
    err = error_of(tmp_path, "http://", {})
    assert "--agent" in str(err) and err.exit_code == 2


# -- --agent NAME from the agents file -------------------------------------------------------------


def test_the_agents_file_defaults_to_the_users_config_dir(tmp_path):
    assert agents_file_path({"HOME": str(tmp_path)}) == tmp_path / ".config" / "duro" / "agents.toml"
    assert agents_file_path({"HOME": str(tmp_path), "DURO_AGENTS_FILE": "/etc/a.toml"}) == Path("/etc/a.toml")


def test_a_named_agent_from_the_default_file(tmp_path):
    config = tmp_path / ".config" / "duro"
    config.mkdir(parents=True)
    (config / "agents.toml").write_text('[agents.staging]\nurl = "http://10.0.0.9:8787"\n')
    target = resolve_target(tmp_path, "staging", {"HOME": str(tmp_path), "DURO_TOKEN": "x"})
    assert (target.url, target.token) == ("http://10.0.0.9:8787", "x")
    assert target.description == "agent 'staging' at http://10.0.0.9:8787"


PROD = '[agents.prod]\nurl = "http://10.0.0.5:8787"\ntoken_env = "DURO_PROD_TOKEN"\n'


def test_a_named_agent_reads_its_token_from_its_token_env(tmp_path):
    env = write_agents(tmp_path, PROD)
    target = resolve_target(tmp_path, "prod", {**env, "DURO_PROD_TOKEN": "p", "DURO_TOKEN": "generic"})
    assert (target.url, target.token) == ("http://10.0.0.5:8787", "p")
    assert "DURO_PROD_TOKEN" in target.token_hint


def test_a_token_env_that_is_not_set_says_so(tmp_path):
    env = write_agents(tmp_path, PROD)
    err = error_of(tmp_path, "prod", {**env, "DURO_TOKEN": "generic"})
    assert "$DURO_PROD_TOKEN, which is not set" in str(err) and err.exit_code == 2


def test_an_unknown_agent_lists_the_known_ones_and_the_file(tmp_path):
    env = write_agents(tmp_path, '[agents.prod]\nurl = "http://a:1"\n\n[agents.edge]\nurl = "http://b:2"\n')
    err = error_of(tmp_path, "prdo", env)
    assert "unknown agent 'prdo'" in str(err) and "defines edge, prod" in str(err)
    assert env["DURO_AGENTS_FILE"] in str(err) and err.exit_code == 2


def test_an_unknown_agent_without_an_agents_file_shows_how_to_write_one(tmp_path):
    err = error_of(tmp_path, "prod", {"DURO_AGENTS_FILE": str(tmp_path / "none.toml")})
    assert "does not exist" in str(err) and "[agents.prod]" in str(err) and "--agent http://" in str(err)
    assert err.exit_code == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[agents.prod\nurl = 1", "is not valid TOML"),
        ("agents = 3", "is malformed"),
        ("[agents]\nprod = 'http://a:1'", "is malformed"),
        ("[agents.prod]\nurl = 'ftp://a:1'", 'needs url = "http://HOST:PORT"'),
        ("[agents.prod]\ntoken_env = 'X'", "needs url ="),
        ("[agents.prod]\nurl = 'http://a:1'\ntoken = 'inline'", "unknown key 'token'"),
        ("[agents.prod]\nurl = 'http://a:1'\ntoken_env = 5", "token_env must name an environment variable"),
    ],
)
def test_a_malformed_agents_file_is_named_with_what_is_wrong(tmp_path, text, expected):
    env = write_agents(tmp_path, text)
    err = error_of(tmp_path, "prod", env)
    assert expected in str(err) and env["DURO_AGENTS_FILE"] in str(err) and err.exit_code == 2


# -- through the CLI: the error and its exit code ---------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["limits", "list"],
        ["runs", "list"],
        ["runs", "show", "r1"],
        ["start", "place_call"],
        ["signal", "r1", "go"],
        ["limits", "slots", "calls"],
        ["limits", "capacity", "calls", "3"],
        ["limits", "max-hold", "calls", "reset"],
        ["limits", "release", "calls:1", "--yes"],
        ["runs", "cancel", "r1"],
    ],
)
def test_every_command_without_a_dev_server_exits_3_and_says_how_to_start_one(tmp_path, args):
    result = CliRunner().invoke(main, [*args, "--project", str(tmp_path)])
    assert result.exit_code == 3, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: no dev server found for {tmp_path.resolve()}")
    assert f"start one with `duro dev {tmp_path.resolve()}`" in result.stderr


def test_an_unknown_agent_exits_2(tmp_path, monkeypatch):
    monkeypatch.setenv("DURO_AGENTS_FILE", str(tmp_path / "agents.toml"))
    (tmp_path / "agents.toml").write_text('[agents.prod]\nurl = "http://10.0.0.5:8787"\n')
    result = CliRunner().invoke(main, ["limits", "list", "--agent", "staging"])
    assert result.exit_code == 2
    assert "unknown agent 'staging'" in result.stderr and "defines prod" in result.stderr
