"""``GET /metrics`` and ``--log-format json`` on a live ``duro dev``: slots driven through grant, wait,
release, timeout and expiry over the HTTP API (with a hot reload in between), and each metric moved
by exactly what happened; the token guards ``/metrics`` as it guards ``/api/``; the JSON log lines."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.devserver import DevServer, running_dev_server
from tests.support.waiting import wait_until

LIMIT = "line"
CONFIG = """\
from duro import Limit, define_workspace

workspace = define_workspace(limits={"line": Limit(capacity=1, max_hold="2s")})
"""
WORKFLOWS = """\
from duro import acquire_slot, release_slot, wait_for_signal, workflow


@workflow(name="call")
async def call(inp: dict) -> str:
    slot = await acquire_slot("line", label=f"customer-{inp['n']}", timeout=inp.get("timeout", "30s"))
    await wait_for_signal("done", timeout="30s")
    await release_slot(slot.id)  # after max_hold took it back: nothing to release
    return "done"
"""

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "calls"
    (root / "workflows").mkdir(parents=True)
    (root / "duro.config.py").write_text(CONFIG)
    (root / "workflows" / "calls.py").write_text(WORKFLOWS)
    return root


@pytest.fixture
def server(project: Path) -> Iterator[DevServer]:
    with running_dev_server(project, args=("--log-format", "json")) as live:
        yield live


def scrape(client: httpx.Client) -> Samples:
    answer = client.get("/metrics")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def start(client: httpx.Client, inp: dict) -> str:
    answer = client.post("/api/workflows/call/runs", json={"input": inp})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["run"]["id"])


def status(client: httpx.Client, run_id: str) -> str:
    return str(client.get(f"/api/runs/{run_id}").json()["run"]["status"])


def wait_metric(client: httpx.Client, name: str, target: float, **labels: str) -> Samples:
    return wait_until(
        lambda: (s := scrape(client)) and value(s, name, **labels) >= target and s,
        10,
        f"{name}{labels} to reach {target}",
    )


def wait_status(client: httpx.Client, run_id: str, wanted: str) -> None:
    wait_until(lambda: status(client, run_id) == wanted, 10, f"run {run_id} to be {wanted}")


def test_slots_through_grant_wait_release_timeout_and_expiry_move_each_metric_by_what_happened(
    server: DevServer, project: Path
):
    with server.client() as client:
        before = scrape(client)
        assert value(before, "duro_limit_capacity", limit=LIMIT) == 1
        assert value(before, "duro_limit_busy", limit=LIMIT) == 0
        assert value(before, "duro_limit_waiting", limit=LIMIT) == 0

        # grant, wait, release: the first takes the slot at once, the second queues behind it
        first = start(client, {"n": 1})
        wait_metric(client, "duro_slot_wait_seconds_count", 1, limit=LIMIT)
        second = start(client, {"n": 2})
        queued = wait_metric(client, "duro_limit_waiting", 1, limit=LIMIT)
        assert value(queued, "duro_limit_busy", limit=LIMIT) == 1
        assert value(queued, "duro_slot_wait_seconds_count", limit=LIMIT) == 1
        client.post(f"/api/runs/{first}/signals/done")
        wait_metric(client, "duro_slot_wait_seconds_count", 2, limit=LIMIT)  # handed to the second
        client.post(f"/api/runs/{second}/signals/done")
        for run_id in (first, second):
            wait_status(client, run_id, "completed")

        # a reload swaps the engine: the counters do not go back, and the new engine is counted
        reloads = client.get("/api/status").json()["reloads"]
        (project / "duro.config.py").write_text(CONFIG + "# saved again\n")
        wait_until(lambda: client.get("/api/status").json()["reloads"] > reloads, 10, "the reload")
        reloaded = scrape(client)
        assert value(reloaded, "duro_slot_wait_seconds_count", limit=LIMIT) == 2
        assert value(reloaded, "duro_slot_hold_seconds_count", limit=LIMIT) == 2

        # timeout and expiry: a holder that never releases in time, and a waiter with timeout 1s
        keeper = start(client, {"n": 3})
        wait_metric(client, "duro_slot_wait_seconds_count", 3, limit=LIMIT)
        impatient = start(client, {"n": 4, "timeout": "1s"})
        wait_status(client, impatient, "failed")  # SlotTimeoutError, 1s in, before max_hold (2s)
        wait_metric(client, "duro_slot_expired_total", 1, limit=LIMIT)
        client.post(f"/api/runs/{keeper}/signals/done")
        wait_status(client, keeper, "completed")

        after = scrape(client)
        moved = {
            name: value(after, name, **labels) - value(before, name, **labels)
            for name, labels in [
                ("duro_slot_wait_seconds_count", {"limit": LIMIT}),
                ("duro_slot_hold_seconds_count", {"limit": LIMIT}),
                ("duro_slot_expired_total", {"limit": LIMIT}),
                ("duro_slot_timeouts_total", {"limit": LIMIT}),
                ("duro_slot_reservations_lapsed_total", {"limit": LIMIT}),
                ("duro_runs_started_total", {"workflow": "call"}),
            ]
        }
        assert moved == {
            "duro_slot_wait_seconds_count": 3,  # first, second, keeper
            "duro_slot_hold_seconds_count": 3,  # first and second released, keeper's expired
            "duro_slot_expired_total": 1,
            "duro_slot_timeouts_total": 1,
            "duro_slot_reservations_lapsed_total": 0,
            "duro_runs_started_total": 4,
        }
        finished = {
            labels: count
            for (name, labels), count in after.items()
            if name == "duro_runs_finished_total" and count  # every status's series is there from 0
        }
        assert finished == {
            (("status", "completed"), ("workflow", "call")): 3,
            (("status", "failed"), ("workflow", "call")): 1,
        }
        assert value(after, "duro_run_duration_seconds_count", workflow="call") == 4
        assert value(after, "duro_slot_hold_seconds_sum", limit=LIMIT) >= 2  # the keeper's 2s hold
        assert value(after, "duro_slot_wait_seconds_sum", limit=LIMIT) < 60
        for gauge, expected in [("capacity", 1), ("busy", 0), ("reserved", 0), ("waiting", 0)]:
            assert value(after, f"duro_limit_{gauge}", limit=LIMIT) == expected

        # no label names a slot, a label or a run: only limits, workflows, statuses and buckets
        run_ids = {first, second, keeper, impatient}
        label_names = {name for _, labels in after for name, _ in labels}
        assert label_names == {"limit", "workflow", "status", "le"}
        label_values = {text for _, labels in after for _, text in labels}
        assert not label_values & run_ids
        assert not any(text.startswith("customer-") for text in label_values)

    # the JSON log: one object per line, a line per grant, timeout and expiry, no labels or run ids
    lines = [json.loads(line) for line in server.log().splitlines() if line.strip()]
    for line in lines:
        assert {"ts", "level", "logger", "message"} <= line.keys()
        assert line["ts"].endswith("+00:00")
    slot_lines = [line for line in lines if line["logger"] == "duro.limits"]
    events = [line["event"] for line in slot_lines]
    assert events.count("slot.granted") == 3
    assert events.count("slot.timed_out") == 1
    assert events.count("slot.expired") == 1
    expired = next(line for line in slot_lines if line["event"] == "slot.expired")
    assert expired["level"] == "WARNING" and expired["limit"] == LIMIT and expired["held_ms"] >= 2000
    granted = next(line for line in slot_lines if line["event"] == "slot.granted")
    assert set(granted) == {"ts", "level", "logger", "message", "event", "limit", "wait_ms"}
    assert "customer-" not in server.log()
    ours = json.dumps([line for line in lines if line["logger"].startswith("duro.")])
    assert not any(run_id in ours for run_id in run_ids)  # the access log has paths, duro's lines none


def test_with_a_token_metrics_needs_it(project: Path):
    with running_dev_server(project, args=("--token", "s3cret")) as live, live.client() as client:
        refused = client.get("/metrics")
        assert refused.status_code == 401 and "token" in refused.json()["message"]
        assert client.get("/metrics", headers={"authorization": "Bearer wrong"}).status_code == 401
        ok = client.get("/metrics", headers={"authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and 'duro_limit_capacity{limit="line"} 1.0' in ok.text
        assert client.get("/metrics", headers={"host": "rebind.evil.example"}).status_code == 400
