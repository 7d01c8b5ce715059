"""The whole dev loop on a project made by ``duro init``: ``duro dev`` as a subprocess, driven by the
``duro`` command (a subprocess too) and the API: start, a queue on the template's limit, the limits
verbs, an override surviving a restart of the server, and a hot reload changing a workflow's output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.devserver import running_dev_server
from tests.support.waiting import wait_until

DURO = [sys.executable, "-m", "duro_devserver"]


def duro(*args: str, project: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*DURO, *args], capture_output=True, text=True, timeout=60, cwd=project)
    if check:
        assert done.returncode == 0, (
            f"duro {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done


def as_json(*args: str, project: Path) -> dict:
    return json.loads(duro(*args, "--json", project=project).stdout)


def test_init_then_the_whole_dev_loop(tmp_path: Path):
    project = tmp_path / "shop"
    duro("init", str(project), project=tmp_path)
    assert (project / "duro.config.py").is_file()

    with running_dev_server(project) as server:
        runs = [
            as_json("start", "sync_orders", "--input", json.dumps(f"acct-{n}"), project=project)["run"]["id"]
            for n in range(3)
        ]
        slots = wait_until(
            lambda: len(s := as_json("limits", "slots", "partner-api", project=project)["slots"]) == 3 and s,
            15,
            "two sessions busy and one run queued",
        )
        assert [s["state"] for s in slots] == ["busy", "busy", "waiting"]
        assert slots[2]["run_id"] == runs[2] and slots[2]["position"] == 1
        table = duro("limits", "list", project=project).stdout
        assert "partner-api" in table and "10m" in table

        raised = as_json("limits", "capacity", "partner-api", "3", project=project)["limit"]
        assert (raised["effective_capacity"], raised["capacity_override"]) == (3, 3)
        wait_until(
            lambda: (
                [s["state"] for s in as_json("limits", "slots", "partner-api", project=project)["slots"]]
                == ["busy"] * 3
            ),
            15,
            "the queued run to get the third session",
        )
        assert (
            as_json("limits", "max-hold", "partner-api", "20m", project=project)["limit"]["max_hold_override"]
            == "20m"
        )
        refused = duro("limits", "capacity", "partner-api", "0", project=project, check=False)
        assert refused.returncode == 2 and "1 to 100000" in refused.stderr  # the CLI checks it itself

        welcome = dict(email="ada@example.com", name="Ada")
        first = as_json("start", "welcome", "--input", json.dumps(welcome), project=project)["run"]["id"]
        source = project / "workflows" / "welcome.py"
        with server.client() as client:
            reloads = client.get("/api/status").json()["reloads"]
            source.write_text(
                source.read_text().replace('f"Welcome, {user.name}!"', 'f"Hello there, {user.name}!"')
            )
            wait_until(lambda: client.get("/api/status").json()["reloads"] > reloads, 10, "the reload")
        second = as_json("start", "welcome", "--input", json.dumps(welcome), project=project)["run"]["id"]
        steps = wait_until(
            lambda: (d := as_json("runs", "show", second, project=project))["steps"] and d["steps"],
            15,
            "the new run's first step",
        )
        assert steps[0]["result"] == "sent 'Hello there, Ada!' to ada@example.com"
        assert (
            as_json("runs", "show", first, project=project)["run"]["status"] == "suspended"
        )  # sleeping a day

    with running_dev_server(project):  # a restart: the overrides and the sleeping run are still there
        limit = as_json("limits", "list", project=project)["limits"][0]
        assert (limit["capacity_override"], limit["max_hold_override"]) == (3, "20m")
        assert as_json("runs", "show", first, project=project)["run"]["status"] == "suspended"
        reset = as_json("limits", "capacity", "partner-api", "reset", project=project)["limit"]
        assert reset["capacity_override"] is None and reset["effective_capacity"] == 2

    down = duro("limits", "list", project=project, check=False)
    assert down.returncode == 3 and "duro dev" in down.stderr
