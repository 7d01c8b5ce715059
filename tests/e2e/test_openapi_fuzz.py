"""The API's OpenAPI description, fuzzed by schemathesis against a real ``duro dev`` process:
no input it can generate from the description makes the server answer with a 5xx, and every
answer matches the description (status codes and bodies).

Two parts. schemathesis generates cases from the description, valid ones and ones that break it
(its negative mode: wrong JSON types, out-of-range numbers, missing fields; strings may hold NUL).
Generated data seldom reaches the shapes that broke the server once, so every operation
also gets hand-made hostile cases, sent through schemathesis and checked by it: each path and query
parameter (and one it does not know) holding a NUL, query numbers and arrays of the wrong type, and
each body (and each field of it, nested ones included) replaced by a value of every wrong JSON type,
a string with NUL or a lone surrogate, a number too big for any column, and JSON nested 150, 2,000
and 100,000 deep. Those run once on SQLite and once on the real PostgreSQL (NUL is the store's
business), and the server's log shows no traceback, no driver error and no NUL."""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error, response_schema_conformance, status_code_conformance
from schemathesis.core.failures import FailureGroup
from schemathesis.generation import GenerationMode

from duro_devserver.api.openapi import openapi_document
from tests.support.devserver import DevServer, running_dev_server
from tests.support.waiting import wait_until

PROJECT = Path(__file__).parent / "project"
schema = schemathesis.openapi.from_dict(openapi_document())
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], allow_x00=True)
CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance]


def _copy_project(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    project = tmp_path_factory.mktemp(name) / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns(".duro", "__pycache__"))
    return project


@dataclass
class Seeded:
    """What the server holds before the cases arrive: the real values path parameters start from."""

    server: DevServer
    run_id: str  # a run holding partner-api's slot, waiting for the signal "done"
    slot_id: str


def _seed(server: DevServer) -> Seeded:
    """Something to find: runs, a busy slot, a waiter, a schedule."""
    with server.client() as client:
        runs = [
            client.post("/api/workflows/hold/runs", json={"input": {"tenant": job, "job": job}}).json()[
                "run"
            ]["id"]
            for job in ("1", "2")
        ]
        client.post(
            "/api/schedules",
            json={"name": "nightly", "workflow": "greet", "cron": "0 3 * * *", "input": {"name": "night"}},
        )
        slot = wait_until(
            lambda: next(
                (
                    s
                    for s in client.get("/api/limits/partner-api/slots").json()["slots"]
                    if s["state"] == "busy"
                ),
                None,
            ),
            15,
            "a run to take the slot",
        )
    assert slot["run_id"] in runs
    return Seeded(server, slot["run_id"], slot["id"])


@pytest.fixture(scope="module")
def fuzzed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    with running_dev_server(_copy_project(tmp_path_factory, "fuzz")) as server:
        _seed(server)
        yield server


@schema.exclude(path="/api/events").parametrize()
@hypothesis.settings(
    max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(hypothesis.HealthCheck)
)
def test_no_input_makes_the_server_fail(case: schemathesis.Case, fuzzed_server: DevServer) -> None:
    case.call_and_validate(base_url=fuzzed_server.url, checks=CHECKS)


# -- hand-made hostile shapes -------------------------------------------------------------------------

NUL = "\x00"


def _nested_list(depth: int) -> str:
    return "[" * depth + "]" * depth


def _nested_object(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


# JSON text, put in place of a whole body or of one field of a valid body
HOSTILE_JSON = {
    "true": "true",
    "false": "false",
    "null": "null",
    "string 3": '"3"',
    "int 3": "3",
    "float": "1.5",
    "negative": "-1",
    "huge int": "1" + "0" * 30,
    "huge float": "1e999",
    "array": "[]",
    "array of 3": "[3]",
    "object": "{}",
    "NUL string": '"x\\u0000y"',
    "lone NUL": '"\\u0000"',
    "lone surrogate": '"\\ud800"',
    "list 150 deep": _nested_list(150),
    "object 150 deep": _nested_object(150),
    "list 2000 deep": _nested_list(2_000),
    "object 2000 deep": _nested_object(2_000),
    "list 100000 deep": _nested_list(100_000),
}
HOSTILE_STRINGS = {"NUL at the end": "{real}" + NUL, "lone NUL": NUL, "NUL inside": "{real}" + NUL + "x"}
HOSTILE_QUERY_NUMBERS = ["true", "3.0", "-1", "0", "1" + "0" * 30, "[]", NUL, "1" + NUL]

# valid bodies for each operation that takes one (with the path parameters they need, if not the usual
# ones), and the fields to replace in each, nested ones as a path of keys
VALID_BODIES: dict[str, list[tuple[dict[str, str], Any, list[tuple[str, ...]]]]] = {
    "POST /api/workflows/{name}/runs": [
        (
            {"name": "greet"},
            {"input": {"name": "x"}, "concurrency": {"key": "k", "limit": 5}},  # no run_id: no replay
            [
                ("input",),
                ("input", "name"),
                ("run_id",),
                ("concurrency",),
                ("concurrency", "key"),
                ("concurrency", "limit"),
            ],
        ),
        # hold's input is a plain dict: what is sent is what is stored (no quota: its key null is unlimited)
        (
            {"name": "hold"},
            {"input": {"tenant": "h", "job": "1", "data": 1}, "concurrency": {"key": None, "limit": 1}},
            [("input", "job"), ("input", "data")],
        ),
        ({"name": "hold"}, {"input": {"tenant": "h", "job": "1"}}, [("input", "tenant")]),  # its quota key
    ],
    "POST /api/runs/{id}/signals/{name}": [({}, {"any": "payload"}, [("any",)])],
    "PUT /api/limits/{name}/capacity": [({}, {"capacity": 1}, [("capacity",)])],
    "PUT /api/limits/{name}/max-hold": [({}, {"max_hold": "1h"}, [("max_hold",)])],
    "POST /api/schedules": [
        (
            {},
            {
                "name": "hostile",
                "workflow": "greet",
                "cron": "0 4 * * *",
                "input": {"name": "x"},
                "concurrency": {"key": "k", "limit": 1},
            },
            [
                ("name",),
                ("workflow",),
                ("cron",),
                ("input",),
                ("input", "name"),
                ("concurrency",),
                ("concurrency", "key"),
                ("concurrency", "limit"),
            ],
        ),
    ],
}
PLACEHOLDER = "__hostile__"


def _with_placeholder(body: Any, path: tuple[str, ...]) -> Any:
    body = json.loads(json.dumps(body))
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = PLACEHOLDER
    return body


def _real_path_values(operation: Any, seeded: Seeded) -> dict[str, str]:
    path = operation.path
    if path.startswith("/api/workflows/"):
        return {"name": "greet"}
    if path.startswith("/api/runs/"):
        return {"id": seeded.run_id, "name": "poke"}  # a signal no run waits for: it changes nothing
    if path.startswith("/api/limits/"):
        return {"name": "partner-api"}
    if path.startswith("/api/slots/"):
        return {"id": seeded.slot_id}
    return {"name": "nightly"}  # /api/schedules/{name}


def hostile_cases(operation: Any, seeded: Seeded) -> Iterator[tuple[str, dict[str, Any]]]:
    """(what, Case keyword arguments) for every hostile shape that fits the operation."""
    definition = operation.definition.raw
    params = {(p["in"], p["name"]): p.get("schema", {}) for p in definition.get("parameters", [])}
    real = {
        name: value
        for name, value in _real_path_values(operation, seeded).items()
        if ("path", name) in params
    }
    label = f"{operation.method.upper()} {operation.path}"
    bodies = VALID_BODIES.get(label, [])
    base: dict[str, Any] = {"path_parameters": dict(real)}
    if bodies:
        base.update(body=json.dumps(bodies[0][1]).encode(), media_type="application/json")
    # beside ids with NUL, so that the unknown parameter is the only news (no cancel, no release)
    nul_ids = {name: value + NUL for name, value in real.items()}
    yield (
        "an unknown query parameter with NUL",
        {**base, "path_parameters": nul_ids, "query": {f"x{NUL}": NUL}},
    )
    for name, value in real.items():
        for what, template in HOSTILE_STRINGS.items():
            yield (
                f"path {name}: {what}",
                {**base, "path_parameters": {**real, name: template.format(real=value)}},
            )
    for (where, name), param_schema in params.items():
        if where != "query":
            continue
        if param_schema.get("type") == "integer":
            values = HOSTILE_QUERY_NUMBERS
        elif param_schema.get("type") == "array":
            values = [NUL, "running" + NUL, "true", "[]"]
        else:
            values = [NUL, "x" + NUL, "x" + NUL + "y"]
        for value in values:
            yield f"query {name}={value!r}", {**base, "query": {name: value}}
    if ("query", "cursor") in params:
        for forged in (f"1:x{NUL}", f"x{NUL}:r", "1:" + "r" * 10_000):
            cursor = base64.urlsafe_b64encode(forged.encode()).decode()
            yield f"query cursor={forged[:12]!r}...", {**base, "query": {"cursor": cursor}}
    if not bodies:
        return
    for what, text in HOSTILE_JSON.items():
        yield f"body: {what}", {**base, "body": text.encode()}
    yield "body: invalid UTF-8", {**base, "body": b'{"input": "\xff\xfe"}'}
    for path_values, valid, fields in bodies:
        at = {**base, "path_parameters": {**real, **path_values}}
        for path in fields:
            template = json.dumps(_with_placeholder(valid, path))
            for what, text in HOSTILE_JSON.items():
                body = template.replace(f'"{PLACEHOLDER}"', text).encode()
                yield f"{path_values or ''} body.{'.'.join(path)}: {what}", {**at, "body": body}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def hostile_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Seeded]:
    project = _copy_project(tmp_path_factory, f"hostile-{request.param}")
    pg, database = None, None
    if request.param == "sqlite":
        url = f"sqlite:///{project.parent / 'duro.db'}"
    else:
        pg = request.getfixturevalue("pg_server")
        database = pg.create_database()
        url = pg.url(database)
    try:
        with running_dev_server(project, args=("--database-url", url)) as server:
            yield _seed(server)
    finally:
        if pg is not None and database is not None:
            pg.drop_database(database)


OPERATIONS = [op.ok() for op in schema.get_all_operations() if op.ok().path != "/api/events"]


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: f"{op.method.upper()} {op.path}")
def test_hostile_shapes_make_no_server_error(operation: Any, hostile_server: Seeded) -> None:
    failures = []
    count = 0
    for what, kwargs in hostile_cases(operation, hostile_server):
        count += 1
        case = operation.Case(**kwargs)
        try:
            case.call_and_validate(base_url=hostile_server.server.url, checks=CHECKS)
        except (AssertionError, FailureGroup) as failure:  # schemathesis's failures: collect them all
            failures.append(f"{what}: {str(failure)[:2000]}")
    assert count > 0
    log = hostile_server.server.log()
    assert "Traceback" not in log and "DataError" not in log and NUL not in log, log[-5000:]
    assert not failures, "\n\n".join(failures)
