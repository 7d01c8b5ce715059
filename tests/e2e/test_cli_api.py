"""The CLI against a real ``duro dev`` process: start, runs, signal, the limits verbs, exit codes.

Commands run in-process through ``CliRunner`` (``--project`` points at the served project, whose
``.duro/server.json`` the server wrote), and once as the installed ``duro`` script.
"""

from __future__ import annotations

import json
import os
import pty
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from duro import DuroError
from duro_devserver.cli import main
from duro_devserver.client import ApiError, DuroClient, ServerUnreachable
from tests.support.devserver import DevServer, running_dev_server
from tests.support.waiting import wait_until

HOOK = "Esperando hueco · partner-api"


def cli(project: Path, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--project", str(project)])


def ok_json(project: Path, *args: str) -> dict:
    result = cli(project, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def run_id_of(answer: dict) -> str:
    return answer["run"]["id"]


def wait_run(project: Path, run_id: str, status: str) -> dict:
    def reached() -> dict | None:
        detail = ok_json(project, "runs", "show", run_id)
        return detail if detail["run"]["status"] == status else None

    return wait_until(reached, 15, f"run {run_id} to be {status}")


def wait_slots(project: Path, states: list[str]) -> list[dict]:
    def match() -> tuple[list[dict]] | None:
        slots = ok_json(project, "limits", "slots", "partner-api")["slots"]
        return (slots,) if [s["state"] for s in slots] == states else None

    return wait_until(match, 15, f"partner-api's slots to be {states}")[0]


def test_start_then_list_and_show_the_run(dev_server: DevServer):
    project = dev_server.project
    started = cli(project, "start", "greet", "--input", '{"name": "ada", "times": 2}')
    assert started.exit_code == 0, started.output
    assert started.stdout.startswith("started run ") and " of greet (" in started.stdout
    run_id = started.stdout.split()[2]
    detail = wait_run(project, run_id, "completed")
    assert detail["run"]["output"] == "hello ada hello ada"

    listed = cli(project, "runs", "list")
    assert listed.exit_code == 0 and listed.stdout.splitlines()[0].split()[:3] == ["ID", "WORKFLOW", "STATUS"]
    assert listed.stdout.splitlines()[1].split()[:3] == [run_id, "greet", "completed"]
    page = ok_json(project, "runs", "list", "--workflow", "greet", "--status", "completed", "--limit", "5")
    assert [r["id"] for r in page["runs"]] == [run_id] and page["next_cursor"] is None

    shown = cli(project, "runs", "show", run_id)
    assert shown.exit_code == 0
    assert shown.stdout.startswith(f"run {run_id} · greet")
    assert '  output   "hello ada hello ada"' in shown.stdout
    step = next(line for line in shown.stdout.splitlines() if " shout " in line)
    assert step.split()[:4] == ["0", "step", "shout", "completed"]

    again = cli(project, "start", "greet", "--input", '{"name": "ada"}', "--run-id", run_id)
    assert again.exit_code == 0 and "already exists (completed): nothing started" in again.stdout
    same = ok_json(project, "start", "greet", "--input", '{"name": "x"}', "--run-id", run_id)
    assert same["created"] is False


def test_paging_through_runs_with_the_cursor(dev_server: DevServer):
    project = dev_server.project
    ids = [run_id_of(ok_json(project, "start", "greet", "--input", json.dumps({"name": n}))) for n in "abc"]
    first = cli(project, "runs", "list", "--limit", "2")
    assert first.stdout.splitlines()[-1].startswith("more: add --cursor ")
    cursor = first.stdout.splitlines()[-1].split()[-1]
    second = ok_json(project, "runs", "list", "--limit", "2", "--cursor", cursor)
    seen = [line.split()[0] for line in first.stdout.splitlines()[1:3]] + [r["id"] for r in second["runs"]]
    assert sorted(seen) == sorted(ids) and second["next_cursor"] is None


def test_runs_list_all_pages_through_every_run(dev_server: DevServer):
    project = dev_server.project
    ids = [run_id_of(ok_json(project, "start", "greet", "--input", json.dumps({"name": n}))) for n in "abcde"]
    listed = ok_json(project, "runs", "list", "--all", "--limit", "2")
    assert [r["id"] for r in listed["runs"]] == ids[::-1] and listed["next_cursor"] is None
    text = cli(project, "runs", "list", "--all", "--limit", "2")
    assert text.exit_code == 0 and len(text.stdout.splitlines()) == 1 + 5 and "more:" not in text.stdout


def test_runs_prune_dry_run_then_for_real_through_the_server_and_a_database_url(dev_server: DevServer):
    project = dev_server.project
    ids = [run_id_of(ok_json(project, "start", "greet", "--input", json.dumps({"name": n}))) for n in "abc"]
    for run_id in ids:
        wait_run(project, run_id, "completed")
    dry = ok_json(project, "runs", "prune", "--older-than", "0s", "--dry-run")["prune"]
    assert (dry["runs"], dry["dry_run"]) == (3, True) and dry["steps"] >= 3
    assert {r["id"] for r in ok_json(project, "runs", "list", "--all")["runs"]} == set(ids)  # nothing went
    pruned = cli(project, "runs", "prune", "--older-than", "0s")
    assert pruned.exit_code == 0, pruned.output
    assert pruned.stdout.startswith("deleted 3 finished run(s) that ended before ")
    assert ok_json(project, "runs", "list", "--all")["runs"] == []

    more = [run_id_of(ok_json(project, "start", "greet", "--input", json.dumps({"name": n}))) for n in "de"]
    for run_id in more:
        wait_run(project, run_id, "completed")
    url = f"sqlite:///{project / '.duro' / 'dev.db'}"
    direct = ok_json(project, "runs", "prune", "--older-than", "0s", "--database-url", url, "--dry-run")
    assert (direct["prune"]["runs"], direct["prune"]["dry_run"]) == (2, True)
    direct = ok_json(project, "runs", "prune", "--older-than", "0s", "--database-url", url)
    assert (direct["prune"]["runs"], direct["prune"]["dry_run"]) == (2, False)
    assert ok_json(project, "runs", "list", "--all")["runs"] == []

    not_a_db = project / "notes.txt"
    not_a_db.write_text("not a database")
    refused = cli(project, "runs", "prune", "--older-than", "1d", "--database-url", f"sqlite:///{not_a_db}")
    assert refused.exit_code == 2 and "is not a usable SQLite database" in refused.output
    assert "Traceback" not in refused.output
    bad = cli(project, "runs", "prune", "--older-than", "a month")
    assert bad.exit_code == 2 and "--older-than must be a duration such as 30d" in bad.output
    missing = cli(project, "runs", "prune")
    assert missing.exit_code == 2 and "--older-than" in missing.output


def test_a_quota_refusal_exits_1_and_names_key_limit_and_active(dev_server: DevServer):
    project = dev_server.project
    for job in ("1", "2"):
        inp = json.dumps({"tenant": "acme", "job": job})
        assert cli(project, "start", "hold", "--input", inp).exit_code == 0
    refused = cli(project, "start", "hold", "--input", '{"tenant": "acme", "job": "3"}')
    assert refused.exit_code == 1 and refused.stdout == ""
    assert refused.stderr.startswith("error: refused: workflow 'hold' is at its concurrency limit")
    assert "key 'acme', limit 2, active 2" in refused.stderr

    as_json = cli(project, "start", "hold", "--input", '{"tenant": "acme", "job": "3"}', "--json")
    assert as_json.exit_code == 1
    body = json.loads(as_json.stdout)
    assert (body["error"], body["key"], body["limit"], body["active"]) == ("concurrency_limit", "acme", 2, 2)

    per_start = cli(
        project,
        "start",
        "greet",
        "--input",
        '{"name": "x"}',
        "--concurrency-key",
        "k",
        "--concurrency-limit",
        "0",
    )
    assert per_start.exit_code == 1 and "key 'k', limit 0, active 0" in per_start.stderr
    assert len(ok_json(project, "runs", "list")["runs"]) == 2  # refused starts created nothing


def test_refusals_of_other_kinds_exit_1_with_the_servers_message(dev_server: DevServer):
    project = dev_server.project
    unknown = cli(project, "start", "nope")
    assert unknown.exit_code == 1 and unknown.stderr.startswith("error: ") and "nope" in unknown.stderr
    bad_input = cli(project, "start", "greet", "--input", '{"times": 2}')
    assert bad_input.exit_code == 1 and "name" in bad_input.stderr
    for args in (
        ["runs", "show", "missing"],
        ["runs", "cancel", "missing"],
        ["signal", "missing", "done"],
        ["limits", "slots", "nope"],
        ["limits", "release", "nope.0", "--yes"],
    ):
        result = cli(project, *args)
        assert result.exit_code == 1, (args, result.output)
        assert result.stderr.startswith("error: ") and result.stdout == ""


def test_a_missing_run_and_a_signal_to_an_ended_one_say_so(dev_server: DevServer):
    project = dev_server.project
    missing = cli(project, "runs", "show", "missing")
    assert missing.exit_code == 1
    assert missing.stderr.startswith("error: run 'missing' does not exist on the dev server at http://")
    assert "`duro runs list`" in missing.stderr and "GET /api" not in missing.stderr
    as_json = cli(project, "signal", "missing", "done", "--json")
    assert as_json.exit_code == 1
    not_found = json.loads(as_json.stdout)
    assert (not_found["error"], not_found["run_id"]) == ("not_found", "missing")
    run_id = run_id_of(ok_json(project, "start", "greet", "--input", '{"name": "ada"}'))
    wait_run(project, run_id, "completed")
    late = cli(project, "signal", run_id, "done")
    assert late.exit_code == 1
    assert (
        late.stderr
        == f"error: cannot send signal 'done' to run '{run_id}': the run has ended (completed); signals reach only runs that have not finished: start a new run to act on it\n"
    )
    body = json.loads(cli(project, "signal", run_id, "done", "--json").stdout)
    assert (body["error"], body["run_id"], body["status"]) == ("conflict", run_id, "completed")
    bad = json.loads(cli(project, "start", "greet", "--input", '{"times": "many"}', "--json").stdout)
    assert bad["workflow"] == "greet" and [e["loc"] for e in bad["errors"]] == [["name"], ["times"]]


def test_error_messages_are_for_people_not_python(dev_server: DevServer):
    project = dev_server.project
    invalid = cli(project, "start", "greet", "--input", '{"times": "many"}')
    assert invalid.exit_code == 1
    assert invalid.stderr.startswith(
        "error: input of workflow 'greet' is invalid: name: Field required; "
        "times: Input should be a valid integer"
    )
    assert "pydantic.dev" not in invalid.stderr and "validation error" not in invalid.stderr
    assert invalid.stderr.count("\n") == 1
    unknown_slot = cli(project, "limits", "release", "nope.0", "--yes")
    assert unknown_slot.exit_code == 1 and "duro limits slots LIMIT" in unknown_slot.stderr
    assert "engine.limits" not in unknown_slot.stderr
    with dev_server.client() as client:  # over HTTP: the body's JSON values, never Python's
        refused = client.put("/api/limits/partner-api/max-hold", json={"max_hold": "2H"})
        assert refused.status_code == 422
        message = refused.json()["message"]
        assert "a JSON integer of milliseconds, or null to reset" in message and "timedelta" not in message
        missing = client.post("/api/slots/nope.0/release")
        assert missing.status_code == 404 and "GET /api/limits/{name}/slots" in missing.json()["message"]


def test_limits_slots_release_and_a_signal(dev_server: DevServer):
    project = dev_server.project
    first = run_id_of(ok_json(project, "start", "hold", "--input", '{"tenant": "a", "job": "1"}'))
    second = run_id_of(ok_json(project, "start", "hold", "--input", '{"tenant": "b", "job": "2"}'))
    busy, waiting = wait_slots(project, ["busy", "waiting"])
    assert (busy["run_id"], busy["label"]) == (first, "job 1")
    assert (waiting["run_id"], waiting["label"], waiting["position"]) == (second, "job 2", 1)

    listed = cli(project, "limits", "list")
    assert listed.exit_code == 0
    assert listed.stdout.splitlines() == [
        "NAME         CAPACITY  BUSY  RESERVED  WAITING  MAX HOLD",
        "partner-api  1            1         0        1  1h",
    ]
    slots = cli(project, "limits", "slots", "partner-api").stdout.splitlines()
    assert slots[0] == "partner-api: capacity 1, busy 1, reserved 0, waiting 1, max hold 1h"
    held, queue = slots.index("held (1)"), slots.index("queue (1)")
    assert held < queue
    assert slots[held + 2].split()[:5] == [busy["id"], "busy", first, "job", "1"]
    assert slots[queue + 2].split()[:5] == ["1", waiting["id"], second, "job", "2"]

    shown = cli(project, "runs", "show", second).stdout
    hook = next(line for line in shown.splitlines() if HOOK in line)
    assert "hook" in hook and "waiting" in hook and "limit partner-api" in hook

    refused = cli(project, "limits", "release", busy["id"])
    assert refused.exit_code == 2
    assert refused.stderr == (
        f"error: add --yes to release slot {busy['id']} (it frees the slot for the next run in the queue)\n"
    )
    released = cli(project, "limits", "release", busy["id"], "--yes")
    assert released.exit_code == 0 and released.stdout.startswith(f"released slot {busy['id']}")
    (now_busy,) = wait_slots(project, ["busy"])
    assert now_busy["run_id"] == second
    again = ok_json(project, "limits", "release", busy["id"], "--yes")
    assert again == {"released": False, "slot_id": busy["id"]}

    sent = cli(project, "signal", second, "done", "--payload", '{"ok": true}')
    assert sent.exit_code == 0 and sent.stdout == f"sent signal done to run {second}\n"
    assert wait_run(project, second, "completed")["run"]["output"] == "job 2 done"
    wait_slots(project, [])

    cancelled = cli(project, "runs", "cancel", first)  # recorded: its worker delivers it to the code
    assert cancelled.exit_code == 0 and cancelled.stdout in (
        f"cancelled run {first}\n",
        f"cancelling run {first}: its code is told now, and the run ends cancelled when it has finished\n",
    )
    wait_run(project, first, "cancelled")
    again = cli(project, "runs", "cancel", first)  # docs/cli.md: a run that had ended is left as it is
    assert again.exit_code == 0 and again.stdout == f"run {first} is cancelled: nothing to cancel\n"
    assert ok_json(project, "runs", "cancel", first)["run"]["status"] == "cancelled"
    finished = cli(project, "runs", "cancel", second)
    assert finished.exit_code == 0 and finished.stdout == f"run {second} is completed: nothing to cancel\n"


def test_capacity_and_max_hold_overrides_reset_and_survive_a_restart(e2e_project: Path):
    project = e2e_project
    with running_dev_server(project):
        raised = cli(project, "limits", "capacity", "partner-api", "3")
        assert raised.exit_code == 0
        assert raised.stdout == "partner-api: capacity 3 (config 1); waiting runs get any new slot now\n"
        longer = cli(project, "limits", "max-hold", "partner-api", "2h")
        assert longer.exit_code == 0 and longer.stdout.startswith("partner-api: max hold 2h (config 1h);")
        row = cli(project, "limits", "list").stdout.splitlines()[1]
        assert "3 (config 1)" in row and row.endswith("2h (config 1h)")

        for args in (
            ["max-hold", "partner-api", "31d"],
            ["capacity", "nope", "2"],
            ["max-hold", "nope", "2h"],
        ):
            result = cli(project, "limits", *args)  # what only the server can judge: refused, exit 1
            assert result.exit_code == 1, (args, result.output)
            assert result.stderr.startswith("error: ")
        for args in (
            ["capacity", "partner-api", "0"],
            ["capacity", "partner-api", "many"],
            ["max-hold", "partner-api", "forever"],
            ["max-hold", "partner-api", "2H"],
        ):
            result = cli(project, "limits", *args)  # what the CLI can judge itself: a bad argument, exit 2
            assert result.exit_code == 2, (args, result.output)
            assert result.stderr.startswith("error: ") and "reset" in result.stderr
        for args in (
            ["capacity", "partner-api", "0"],
            ["max-hold", "partner-api", "forever"],
            ["max-hold", "partner-api", "31d"],
        ):
            message = cli(project, "limits", *args).stderr  # in the CLI the word is reset, not null
            assert (
                "null" not in message and "timedelta" not in message and "int of milliseconds" not in message
            )

    with running_dev_server(project):  # a new process on a new port: found again through server.json
        (limit,) = ok_json(project, "limits", "list")["limits"]
        assert (limit["effective_capacity"], limit["capacity_override"], limit["capacity"]) == (3, 3, 1)
        assert (limit["effective_max_hold"], limit["max_hold_override"]) == ("2h", "2h")

        reset = cli(project, "limits", "capacity", "partner-api", "reset")
        assert reset.stdout == "partner-api: capacity reset to the config (1)\n"
        assert cli(project, "limits", "max-hold", "partner-api", "reset").stdout.startswith(
            "partner-api: max hold reset to the config (1h)"
        )
        answer = ok_json(project, "limits", "capacity", "partner-api", "reset")
        assert answer["limit"]["capacity_override"] is None and answer["limit"]["effective_capacity"] == 1
        row = cli(project, "limits", "list").stdout.splitlines()[1]
        assert row.split() == ["partner-api", "1", "0", "0", "0", "1h"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_server_that_does_not_answer_exits_3(e2e_project: Path):
    url = f"http://127.0.0.1:{free_port()}"
    (e2e_project / ".duro").mkdir(exist_ok=True)
    (e2e_project / ".duro" / "server.json").write_text(
        json.dumps({"url": url, "pid": os.getpid(), "token_required": False})
    )
    result = cli(e2e_project, "limits", "list")
    assert result.exit_code == 3 and result.stdout == ""
    assert result.stderr == (
        f"error: the dev server at {url} is not answering (connection refused): "
        f"is `duro dev` running in {e2e_project.resolve()}?\n"
    )
    assert cli(e2e_project, "runs", "list", "--agent", url, "--json").exit_code == 3


def test_a_killed_dev_server_exits_3_and_its_stale_pid_is_named(e2e_project: Path):
    with running_dev_server(e2e_project) as server:
        server.process.kill()
        server.process.wait()
        result = cli(e2e_project, "runs", "list")
    assert result.exit_code == 3
    assert f"the dev server at {server.url} is not answering (connection refused)" in result.stderr
    assert f"names pid {server.process.pid}, which is not running" in result.stderr


def test_a_stopped_dev_server_leaves_no_server_file_and_the_cli_says_how_to_start_one(e2e_project: Path):
    with running_dev_server(e2e_project):
        assert cli(e2e_project, "limits", "list").exit_code == 0
    result = cli(e2e_project, "limits", "list")
    assert result.exit_code == 3 and "start one with `duro dev" in result.stderr


def test_an_agent_by_url_or_by_name(dev_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    by_url = cli(elsewhere, "limits", "list", "--agent", dev_server.url, "--json")
    assert by_url.exit_code == 0 and json.loads(by_url.stdout)["limits"][0]["name"] == "partner-api"
    agents = tmp_path / "agents.toml"
    agents.write_text(f'[agents.local]\nurl = "{dev_server.url}"\n')
    monkeypatch.setenv("DURO_AGENTS_FILE", str(agents))
    by_name = cli(elsewhere, "limits", "list", "--agent", "local")
    assert by_name.exit_code == 0 and by_name.stdout.splitlines()[1].startswith("partner-api")
    unknown = cli(elsewhere, "limits", "list", "--agent", "prod")
    assert unknown.exit_code == 2 and "defines local" in unknown.stderr


def test_a_server_with_a_token(e2e_project: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("DURO_TOKEN", raising=False)
    with running_dev_server(e2e_project, args=("--token", "s3cret")) as server:
        without = cli(e2e_project, "limits", "list")
        assert without.exit_code == 1
        assert without.stderr == (
            f"error: the dev server at {server.url} needs a token: "
            f"set DURO_TOKEN to the token it was started with\n"
        )
        monkeypatch.setenv("DURO_TOKEN", "wrong")
        assert "refused the token" in cli(e2e_project, "limits", "list").stderr
        monkeypatch.setenv("DURO_TOKEN", "s3cret")
        assert cli(e2e_project, "limits", "list").exit_code == 0


def test_the_installed_script_uses_the_working_directorys_dev_server(dev_server: DevServer):
    duro = Path(sys.executable).with_name("duro")
    listed = subprocess.run(
        [str(duro), "limits", "list", "--json"],
        cwd=dev_server.project,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["limits"][0]["name"] == "partner-api" and listed.stderr == ""
    bad = subprocess.run(
        [str(duro), "start", "greet", "--input", "{name: ada}"],
        cwd=dev_server.project,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("error: --input is not valid JSON (Expecting property name enclosed")


def release_on_a_terminal(project: Path, slot_id: str, answer: str) -> subprocess.CompletedProcess[str]:
    """``duro limits release SLOT`` (no --yes) with a terminal as stdin, typing ``answer``."""
    primary, secondary = pty.openpty()
    try:
        os.write(primary, f"{answer}\n".encode())
        return subprocess.run(
            [str(Path(sys.executable).with_name("duro")), "limits", "release", slot_id],
            cwd=project,
            stdin=secondary,
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        os.close(primary)
        os.close(secondary)


def test_release_without_yes_asks_on_a_terminal(dev_server: DevServer):
    project = dev_server.project
    run_id = run_id_of(ok_json(project, "start", "hold", "--input", '{"tenant": "a", "job": "1"}'))
    (busy,) = wait_slots(project, ["busy"])
    declined = release_on_a_terminal(project, busy["id"], "n")
    assert declined.returncode == 1, declined.stderr
    assert f"Release slot {busy['id']}? (it frees the slot for the next run in the queue)" in declined.stderr
    assert declined.stderr.endswith(f"error: slot {busy['id']} not released\n") and declined.stdout == ""
    assert [s["run_id"] for s in wait_slots(project, ["busy"])] == [run_id]
    accepted = release_on_a_terminal(project, busy["id"], "y")
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout.startswith(f"released slot {busy['id']}")
    wait_slots(project, [])


def test_the_client_covers_every_read_endpoint_and_raises_typed_errors(dev_server: DevServer):
    with DuroClient(dev_server.url) as client:
        assert client.health()["ok"] is True
        assert client.status()["project"] == str(dev_server.project)
        assert [w["name"] for w in client.workflows()["workflows"]] == ["call", "checkout", "greet", "hold"]
        assert client.limit("partner-api")["limit"]["effective_capacity"] == 1
        assert isinstance(client.limit_history("partner-api", minutes=5)["points"], list)
        assert client.schedules() == {"schedules": []}
        assert "/api/runs" in client.openapi()["paths"]
        with pytest.raises(ApiError) as missing:
            client.get_run("nope")
        assert (missing.value.status, missing.value.code) == (404, "not_found")
        assert missing.value.message == missing.value.body["message"]
        client.start_run("hold", {"tenant": "t", "job": "1"})
        client.start_run("hold", {"tenant": "t", "job": "2"})
        with pytest.raises(ApiError) as refused:
            client.start_run("hold", {"tenant": "t", "job": "3"})
        assert (refused.value.status, refused.value.body["active"]) == (429, 2)
        assert isinstance(refused.value, DuroError)
    with DuroClient(f"http://127.0.0.1:{free_port()}") as nobody, pytest.raises(ServerUnreachable) as down:
        nobody.health()
    assert down.value.reason == "connection refused" and isinstance(down.value, DuroError)


def test_the_rates_verbs(dev_server: DevServer):
    project = dev_server.project
    listed = cli(project, "rates", "list")
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.splitlines()[0].split()[:3] == ["NAME", "LIMIT", "PER"]
    assert listed.stdout.splitlines()[1].split()[:4] == ["partner-calls", "2", "1m", "no"]
    runs = [run_id_of(ok_json(project, "start", "call", "--input", f'"job{n}"')) for n in range(3)]
    for run_id in runs[:2]:
        wait_run(project, run_id, "completed")

    def one_waiter() -> dict | None:
        answer = ok_json(project, "rates", "waiters", "partner-calls")
        return answer if len(answer["waiters"]) == 1 else None

    waiting = wait_until(one_waiter, 15, "a waiter of partner-calls")
    assert waiting["waiters"][0]["run_id"] == runs[2] and waiting["rate"]["granted"] == 2
    shown = cli(project, "rates", "waiters", "partner-calls")
    assert "granted 2 in the current window, waiting 1" in shown.stdout and runs[2] in shown.stdout
    paused = ok_json(project, "rates", "pause", "partner-calls", "10m")
    assert paused["rate"]["paused_until"] is not None
    raised = cli(project, "rates", "limit", "partner-calls", "3")
    assert raised.exit_code == 0 and "3 (config 2) per 1m" in raised.stdout
    assert ok_json(project, "runs", "show", runs[2])["run"]["status"] != "completed"  # paused
    resumed = cli(project, "rates", "resume", "partner-calls")
    assert resumed.exit_code == 0, resumed.output
    wait_run(project, runs[2], "completed")
    reset = ok_json(project, "rates", "reset", "partner-calls")
    assert reset["rate"]["limit_override"] is None and reset["rate"]["effective_limit"] == 2
    unknown = cli(project, "rates", "pause", "nope", "1m")
    assert unknown.exit_code == 1 and "rate 'nope' does not exist" in unknown.output
    bad = cli(project, "rates", "limit", "partner-calls", "lots")
    assert bad.exit_code == 2 and "duro rates limit partner-calls 150" in bad.output
    bad_duration = cli(project, "rates", "pause", "partner-calls", "soon")
    assert bad_duration.exit_code == 1 and "soon" in bad_duration.output
