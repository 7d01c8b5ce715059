"""The API's OpenAPI description, fuzzed by schemathesis against a real ``duro dev`` process:
no input it can generate from the description makes the server answer with a 5xx, and every
answer matches the description (status codes and bodies)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import hypothesis
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error, response_schema_conformance, status_code_conformance

from duro_devserver.api.openapi import openapi_document
from tests.support.devserver import DevServer, running_dev_server

PROJECT = Path(__file__).parent / "project"
schema = schemathesis.openapi.from_dict(openapi_document())


@pytest.fixture(scope="module")
def fuzzed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    project = tmp_path_factory.mktemp("fuzz") / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns(".duro", "__pycache__"))
    with running_dev_server(project) as server:
        with server.client() as client:  # something to find: a run, a busy slot, a waiter, a schedule
            for job in ("1", "2"):
                client.post("/api/workflows/hold/runs", json={"input": {"tenant": job, "job": job}})
            client.post("/api/schedules", json={"name": "nightly", "workflow": "greet", "cron": "0 3 * * *",
                                                "input": {"name": "night"}})
        yield server


@schema.exclude(path="/api/events").parametrize()
@hypothesis.settings(max_examples=25, deadline=None, derandomize=True,
                     suppress_health_check=list(hypothesis.HealthCheck))
def test_no_input_makes_the_server_fail(case: schemathesis.Case, fuzzed_server: DevServer) -> None:
    case.call_and_validate(base_url=fuzzed_server.url, checks=[not_a_server_error, response_schema_conformance,
                                                               status_code_conformance])
