"""Re-driving runs through a live ``duro dev``: ``duro runs retry|fork|cancel`` (by id and by filter,
dry run, the count confirmed, --yes) and the HTTP routes behind them (their refusals included)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from duro_devserver.cli import main
from tests.support.devserver import DevServer
from tests.support.waiting import wait_until


def cli(project: Path, *args: str, answer: str | None = None) -> Result:
    return CliRunner().invoke(main, [*args, "--project", str(project)], input=answer)


def ok_json(project: Path, *args: str) -> dict:
    result = cli(project, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def start(project: Path, workflow: str, inp: object) -> str:
    return ok_json(project, "start", workflow, "--input", json.dumps(inp))["run"]["id"]


def wait_status(project: Path, run_id: str, status: str) -> dict:
    def reached() -> dict | None:
        detail = ok_json(project, "runs", "show", run_id)
        return detail if detail["run"]["status"] == status else None

    return wait_until(reached, 15, f"run {run_id} to be {status}")


def test_retry_fork_and_cancel_from_the_cli(dev_server: DevServer):
    project = dev_server.project
    down = project / ".duro" / "gateway-down"
    down.write_text("")
    failed = [start(project, "checkout", f"o-{n}") for n in range(3)]
    for run_id in failed:
        wait_status(project, run_id, "failed")

    dry = cli(project, "runs", "retry", failed[0], "--dry-run")
    assert dry.exit_code == 0 and dry.stdout.strip() == f"would retry run {failed[0]} (failed)"
    down.unlink()  # the fix is deployed
    retried = cli(project, "runs", "retry", failed[0])
    assert retried.exit_code == 0, retried.output
    assert retried.stdout.startswith(f"retried run {failed[0]} (attempt 2): it goes on from its failing call")
    detail = wait_status(project, failed[0], "completed")
    assert detail["run"]["attempt"] == 2
    steps = [(s["seq"], s["name"], s["status"], s["attempt"]) for s in detail["steps"]]
    assert steps == [
        (0, "reserve", "completed", 1),
        (1, "charge_card", "failed", 1),
        (1, "charge_card", "completed", 2),
    ]

    shown = cli(project, "runs", "show", failed[0]).stdout
    assert "  attempt  2" in shown and "charge_card (attempt 1)" in shown

    again = cli(project, "runs", "retry", failed[0])  # completed: refused, exit 1
    assert again.exit_code == 1
    assert f"cannot retry run '{failed[0]}': it is completed" in again.output

    # the two others by filter: counted, asked, refused at "n", done with --yes
    would = cli(project, "runs", "retry", "--workflow", "checkout", "--since", "1h", "--dry-run")
    assert would.exit_code == 0 and would.stdout.splitlines()[0] == "would retry 2 run(s):"
    assert sorted(line.strip() for line in would.stdout.splitlines()[1:]) == sorted(failed[1:])
    declined = cli(project, "runs", "retry", "--workflow", "checkout", answer="n\n")
    assert declined.exit_code == 1 and "retry 2 run(s)? [y/N]" in declined.output
    assert "nothing done" in declined.output
    assert ok_json(project, "runs", "show", failed[1])["run"]["status"] == "failed"
    done = cli(project, "runs", "retry", "--workflow", "checkout", "--yes")
    assert done.exit_code == 0 and done.stdout.startswith("retried 2 run(s) (0 refused)"), done.output
    for run_id in failed[1:]:
        wait_status(project, run_id, "completed")

    forked = cli(project, "runs", "fork", failed[0], "--from-seq", "1", "--run-id", "o-0-again")
    assert forked.exit_code == 0, forked.output
    assert forked.stdout.startswith(f"forked run {failed[0]} from seq 1 as run o-0-again")
    copy = wait_status(project, "o-0-again", "completed")
    assert copy["run"]["forked_from"] == [failed[0], 1]
    assert copy["run"]["output"] == "stock for o-0, charged o-0"

    holders = [start(project, "hold", {"tenant": f"t{n}", "job": str(n)}) for n in range(2)]
    for run_id in holders:
        wait_until(
            lambda r=run_id: ok_json(project, "runs", "show", r)["run"]["status"] != "pending", 15, r"a hold"
        )
    nothing = cli(project, "runs", "cancel")
    assert nothing.exit_code == 2 and "give run ids, or a filter" in nothing.output
    cancelled = cli(project, "runs", "cancel", "--workflow", "hold", "--yes")
    assert cancelled.exit_code == 0 and cancelled.stdout.startswith("cancelled 2 run(s) (0 refused)"), (
        cancelled.output
    )
    for run_id in holders:
        wait_status(project, run_id, "cancelled")

    bad = cli(project, "runs", "retry", "--since", "yesterday")
    assert bad.exit_code == 2 and "--since must be a duration" in bad.output


def test_the_http_routes_answer_and_refuse(dev_server: DevServer):
    project = dev_server.project
    (project / ".duro" / "gateway-down").write_text("")
    run_id = start(project, "checkout", "h-1")
    wait_status(project, run_id, "failed")
    with dev_server.client() as client:
        listed = client.post("/api/runs/retry", json={"workflow": "checkout", "dry_run": True})
        assert listed.status_code == 200
        assert listed.json() == {"report": {"run_ids": [run_id], "refused": {}, "dry_run": True}}
        missing = client.post("/api/runs/nobody/retry", json={})
        assert missing.status_code == 404
        bad = client.post(f"/api/runs/{run_id}/fork", json={"from_seq": -1})
        assert bad.status_code == 422
        unknown = client.post(f"/api/runs/{run_id}/retry", json={"version": "9"})
        assert unknown.status_code == 422 and "no version '9'" in unknown.json()["message"]
        (project / ".duro" / "gateway-down").unlink()
        retried = client.post(f"/api/runs/{run_id}/retry", json={})
        assert retried.status_code == 200 and retried.json()["run"]["attempt"] == 2
        twice = client.post(f"/api/runs/{run_id}/retry", json={})
        assert twice.status_code == 409
        assert twice.json()["run_id"] == run_id and twice.json()["status"] in (
            "pending",
            "running",
            "completed",
        )
        wait_status(project, run_id, "completed")
        forked = client.post(f"/api/runs/{run_id}/fork", json={"from_seq": 0, "run_id": "h-1-copy"})
        assert forked.status_code == 201 and forked.json()["run"]["forked_from"] == [run_id, 0]
        taken = client.post(f"/api/runs/{run_id}/fork", json={"from_seq": 0, "run_id": "h-1-copy"})
        assert taken.status_code == 422 and "that id is taken" in taken.json()["message"]
        cancel = client.post("/api/runs/cancel", json={"status": "completed"})
        assert cancel.status_code == 422  # not a status of an unfinished run
