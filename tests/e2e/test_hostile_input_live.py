"""Hostile input sent to a real ``duro dev`` process, once on SQLite and once on the real PostgreSQL:
override values of the wrong JSON type, and NUL characters in a run id, a quota key, a
filter, a run's and a slot's path, and a slot label. Each is the same 4xx on both stores, the store's
rows are what they were before, and the server's log holds no NUL, no driver error and no value sent.

tests/integration/test_hostile_input.py covers the same rules in-process, one request per case; here
one server per store takes every request, over real sockets."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.devserver import DevServer, running_dev_server
from tests.support.store_rows import store_rows
from tests.support.waiting import wait_until

PROJECT = Path(__file__).parent / "project"
NUL = "\x00"
SECRET = "nul-secret"  # in every hostile value: no log line but a request line may show it
Q = f"{SECRET}%00"  # the same, in a URL
ACCESS_LINE = re.compile(r'"(GET|POST|PUT|DELETE) /\S* HTTP/1\.1" \d{3}')


@dataclass
class Live:
    store: str
    url: str  # the store's URL
    server: DevServer
    finished: str  # a completed run
    holding: str  # a run holding partner-api's only slot, waiting for the signal "done"
    slot_id: str


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """One ``duro dev`` per store, with a finished run, a held slot and a run waiting for a signal."""
    root = tmp_path_factory.mktemp(f"hostile-{request.param}")
    project = root / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns(".duro", "__pycache__"))
    pg, database = None, None
    if request.param == "sqlite":
        url = f"sqlite:///{root / 'duro.db'}"
    else:
        pg = request.getfixturevalue("pg_server")
        database = pg.create_database()
        url = pg.url(database)
    try:
        with running_dev_server(project, args=("--database-url", url)) as server, server.client() as client:
            finished = client.post("/api/workflows/greet/runs", json={"input": {"name": "ada"}}).json()[
                "run"
            ]["id"]
            holding = client.post(
                "/api/workflows/hold/runs", json={"input": {"tenant": "a", "job": "1"}}
            ).json()["run"]["id"]
            wait_until(lambda: run_status(client, finished) == "completed", 15, "the greeting to complete")
            wait_until(
                lambda: run_status(client, holding) == "suspended", 15, "the holder to wait for its signal"
            )
            (slot,) = client.get("/api/limits/partner-api/slots").json()["slots"]
            assert (slot["state"], slot["run_id"]) == ("busy", holding)
            yield Live(request.param, url, server, finished, holding, slot["id"])
    finally:
        if pg is not None and database is not None:
            pg.drop_database(database)


def run_status(client: httpx.Client, run_id: str) -> str:
    return client.get(f"/api/runs/{run_id}").json()["run"]["status"]


def refused(answer: httpx.Response, status: int, *words: str) -> str:
    assert answer.status_code == status, (answer.request.method, answer.request.url, answer.text)
    message = answer.json()["message"]
    for word in words:
        assert word in message, message
    assert "DataError" not in message and "Traceback" not in message, message  # it may echo the id: escaped
    return message


def assert_log_is_clean(log: str) -> None:
    """No NUL, no driver error, no traceback; the hostile value only in uvicorn's request lines."""
    assert NUL not in log and "\\x00" not in log
    assert "DataError" not in log and "Traceback" not in log and "psycopg" not in log, log
    for line in log.splitlines():
        if SECRET in line:
            assert ACCESS_LINE.search(line), line


def assert_untouched(live: Live, client: httpx.Client, before: dict) -> None:
    assert store_rows(live.url) == before
    assert run_status(client, live.holding) == "suspended"
    slots = client.get("/api/limits/partner-api/slots").json()["slots"]
    assert [(s["id"], s["state"], s["run_id"]) for s in slots] == [(live.slot_id, "busy", live.holding)]


def test_override_values_of_the_wrong_json_type_are_422_and_change_no_limit(live: Live):
    with live.server.client() as client:
        before = store_rows(live.url)
        for body in (
            {"capacity": True},
            {"capacity": False},
            {"capacity": "3"},
            {"capacity": 3.0},
            {"capacity": [3]},
            {"capacity": {"n": 3}},
            {},
        ):
            refused(client.put("/api/limits/partner-api/capacity", json=body), 422, "capacity", "1 to 100000")
        for body in (
            {"max_hold": True},
            {"max_hold": False},
            {"max_hold": " 2h"},
            {"max_hold": "2H"},
            {"max_hold": "2h "},
            {"max_hold": "1h 30m"},
            {"max_hold": 1.5},
            {"max_hold": ["2h"]},
            {"max_hold": "2h\u0000"},
            {},
        ):
            refused(client.put("/api/limits/partner-api/max-hold", json=body), 422, "max_hold")
        assert_untouched(live, client, before)
        limit = client.get("/api/limits/partner-api").json()["limit"]
        assert (limit["effective_capacity"], limit["capacity_override"]) == (1, None)
        assert (limit["effective_max_hold"], limit["max_hold_override"]) == ("1h", None)


def test_nul_in_ids_keys_and_filters_is_the_same_4xx_on_both_stores_and_stores_nothing(live: Live):
    n = f"{SECRET}{NUL}"
    asks = [
        ("POST", "/api/workflows/greet/runs", {"input": {"name": "x"}, "run_id": n}, 422, "run_id"),
        (
            "POST",
            "/api/workflows/greet/runs",
            {"input": {"name": "x"}, "run_id": f"{live.finished}{NUL}"},
            422,
            "run_id",
        ),
        (
            "POST",
            "/api/workflows/greet/runs",
            {"input": {"name": "x"}, "concurrency": {"key": n, "limit": 3}},
            422,
            "Concurrency key",
        ),
        ("POST", "/api/workflows/hold/runs", {"input": {"tenant": n, "job": "2"}}, 422, "concurrency key"),
        ("GET", f"/api/runs?workflow={Q}", None, 400, "workflow filter"),
        ("GET", "/api/runs?workflow=greet%00&status=completed", None, 400, "workflow filter"),
        ("GET", f"/api/runs/{Q}", None, 404, "does not exist"),
        ("GET", f"/api/runs/{live.finished}%00", None, 404, "does not exist"),
        ("POST", f"/api/runs/{live.holding}%00/cancel", None, 404, "does not exist"),
        ("POST", f"/api/runs/{live.holding}%00/signals/done", None, 404, "does not exist"),
        ("POST", f"/api/slots/{Q}/release", None, 404, "does not exist"),
        ("POST", f"/api/slots/{live.slot_id}%00/release", None, 404, "does not exist"),
    ]
    with live.server.client() as client:
        mark = len(live.server.log())
        before = store_rows(live.url)
        for method, path, body, status, words in asks:
            refused(client.request(method, path, json=body), status, words)
        assert_untouched(live, client, before)
        assert_log_is_clean(live.server.log()[mark:])


def test_a_slot_label_with_nul_fails_its_run_clearly_and_takes_no_slot(live: Live):
    """NUL inside an input is data (JSON spells it ``\\u0000``): the start is a 201. The label made
    from it cannot be stored, so the run fails with a message that names no driver and not the label."""
    with live.server.client() as client:
        mark = len(live.server.log())
        started = client.post(
            "/api/workflows/hold/runs", json={"input": {"tenant": "b", "job": f"{SECRET}{NUL}"}}
        )
        assert started.status_code == 201, started.text
        run_id = started.json()["run"]["id"]
        wait_until(lambda: run_status(client, run_id) == "failed", 15, "the run to fail")
        detail = client.get(f"/api/runs/{run_id}").json()
        assert detail["run"]["input"]["job"] == f"{SECRET}{NUL}"  # kept as it came
        error = str(detail["run"]["error"])
        assert "slot label contains a NUL character" in error, error
        assert "DataError" not in error and SECRET not in error, error
        assert detail["steps"] == []  # no hook step: it never queued
        slots = client.get("/api/limits/partner-api/slots").json()["slots"]
        assert [(s["id"], s["state"], s["run_id"]) for s in slots] == [(live.slot_id, "busy", live.holding)]
        assert_log_is_clean(live.server.log()[mark:])


def test_a_start_with_another_workflows_run_id_is_409_and_the_same_workflows_is_200(live: Live):
    """A run id names one run of one workflow: another workflow's start with it is refused (409,
    naming both workflows) and stores nothing; the same workflow's is the idempotent 200."""
    with live.server.client() as client:
        before = store_rows(live.url)
        answer = client.post(
            "/api/workflows/hold/runs", json={"input": {"tenant": "c", "job": "9"}, "run_id": live.finished}
        )
        message = refused(answer, 409, "greet", "hold")
        assert answer.json()["error"] == "conflict", message
        assert store_rows(live.url) == before
        again = client.post(
            "/api/workflows/greet/runs", json={"input": {"name": "bob"}, "run_id": live.finished}
        )
        assert again.status_code == 200 and again.json()["run"]["id"] == live.finished, again.text
        assert store_rows(live.url) == before
