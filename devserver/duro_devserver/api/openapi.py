"""The API's OpenAPI 3.1 description, built from the route table below and the pydantic models."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from duro.tooling import RUN_STATES

from . import models as m

# (method, path, summary, request body model, {status: response model}, query parameters)
Operation = tuple[str, str, str, type[BaseModel] | None, dict[int, type[BaseModel]], list[dict[str, Any]]]

_STR = {"type": "string"}
_PAGE_SIZE = {"type": "integer", "minimum": 1, "maximum": 1000}
_RUN_FILTERS: list[dict[str, Any]] = [
    {"name": "workflow", "in": "query", "schema": _STR},
    {
        "name": "status",
        "in": "query",
        "schema": {
            "type": "array",
            "items": {
                "type": "string",
                "enum": list(RUN_STATES),
            },
        },
        "style": "form",
        "explode": True,
    },
    {"name": "tag", "in": "query", "schema": _STR},
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500}},
    {"name": "cursor", "in": "query", "schema": _STR},
]
_E = m.ErrorOut
# 503 (every operation but these, added below): the project failed to load, or the store was busy
# or out of reach (then with Retry-After)
_NO_STORE = {"/api/health", "/api/status"}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "seconds to wait before trying again (the store was busy or out of reach)",
        "schema": {"type": "integer", "minimum": 1},
    }
}
OPERATIONS: list[Operation] = [
    ("get", "/api/health", "Is the server up", None, {200: m.HealthOut}, []),
    ("get", "/api/status", "The project, its store and its last load", None, {200: m.StatusOut}, []),
    (
        "get",
        "/api/workflows",
        "Workflows that can be started, with their input schema",
        None,
        {200: m.WorkflowsOut},
        [],
    ),
    (
        "post",
        "/api/workflows/{name}/runs",
        "Start a run",
        m.StartBody,
        {
            201: m.RunCreatedOut,
            200: m.RunCreatedOut,
            400: _E,
            404: _E,
            409: _E,
            413: _E,
            422: m.InputErrorOut,
            429: m.QuotaErrorOut,
        },
        [],
    ),
    ("get", "/api/runs", "Runs, newest first", None, {200: m.RunPageOut, 400: _E}, _RUN_FILTERS),
    (
        "get",
        "/api/runs/{id}",
        "A run and the first page of its steps",
        None,
        {200: m.RunDetailOut, 400: _E, 404: m.RunNotFoundOut},
        [{"name": "steps_limit", "in": "query", "schema": _PAGE_SIZE}],
    ),
    (
        "get",
        "/api/runs/{id}/steps",
        "A page of a run's steps, after the cursor of the page before",
        None,
        {200: m.StepPageOut, 400: _E, 404: m.RunNotFoundOut},
        [
            {"name": "cursor", "in": "query", "schema": _STR},
            {"name": "limit", "in": "query", "schema": _PAGE_SIZE},
        ],
    ),
    (
        "post",
        "/api/runs/prune",
        "Delete finished runs that ended more than older_than ago (dry_run: count them)",
        m.PruneBody,
        {200: m.PruneOnlyOut, 400: _E, 413: _E, 422: _E},
        [],
    ),
    (
        "post",
        "/api/runs/retry",
        "Retry the failed or cancelled runs a filter matches (dry_run: list them)",
        m.RetryRunsBody,
        {200: m.BulkOnlyOut, 400: _E, 413: _E, 422: _E},
        [],
    ),
    (
        "post",
        "/api/runs/cancel",
        "Cancel the unfinished runs a filter matches (dry_run: list them)",
        m.CancelRunsBody,
        {200: m.BulkOnlyOut, 400: _E, 413: _E, 422: _E},
        [],
    ),
    (
        "post",
        "/api/runs/{id}/retry",
        "Retry a failed or cancelled run from its failing call",
        m.RetryBody,
        {
            200: m.RunOnlyOut,
            400: _E,
            404: m.RunNotFoundOut,
            409: m.RunStatusOut,
            413: _E,
            422: _E,
            429: m.QuotaErrorOut,
        },
        [],
    ),
    (
        "post",
        "/api/runs/{id}/fork",
        "Start a new run from a copy of an ended run's calls before from_seq",
        m.ForkBody,
        {
            201: m.RunOnlyOut,
            400: _E,
            404: m.RunNotFoundOut,
            409: m.RunStatusOut,
            413: _E,
            422: _E,
            429: m.QuotaErrorOut,
        },
        [],
    ),
    (
        "post",
        "/api/runs/{id}/cancel",
        "Cancel a run and its unfinished children",
        None,
        {200: m.RunOnlyOut, 404: m.RunNotFoundOut},
        [],
    ),
    (
        "post",
        "/api/runs/{id}/signals/{name}",
        "Send a signal (the body is its JSON payload)",
        None,
        {202: m.SignalSentOut, 400: _E, 404: m.RunNotFoundOut, 409: m.RunEndedOut, 413: _E, 422: _E},
        [],
    ),
    ("get", "/api/limits", "Limits with their live counts", None, {200: m.LimitsOut}, []),
    ("get", "/api/limits/{name}", "One limit", None, {200: m.LimitOnlyOut, 404: _E}, []),
    (
        "get",
        "/api/limits/{name}/slots",
        "A page of a limit's slots: busy first, then the queue in order (next_cursor: the next page)",
        None,
        {200: m.SlotsOut, 400: _E, 404: _E},
        [
            {"name": "key", "in": "query", "schema": _STR},
            {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
            {"name": "cursor", "in": "query", "schema": _STR},
        ],
    ),
    (
        "get",
        "/api/limits/{name}/history",
        "Busy and waiting counts over time",
        None,
        {200: m.HistoryOut, 400: _E, 404: _E},
        [{"name": "minutes", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1440}}],
    ),
    (
        "put",
        "/api/limits/{name}/capacity",
        "Override the capacity (null resets)",
        m.CapacityBody,
        {200: m.LimitOnlyOut, 400: _E, 404: _E, 413: _E, 422: _E},
        [],
    ),
    (
        "put",
        "/api/limits/{name}/max-hold",
        "Override the max hold (null resets)",
        m.MaxHoldBody,
        {200: m.LimitOnlyOut, 400: _E, 404: _E, 413: _E, 422: _E},
        [],
    ),
    (
        "post",
        "/api/slots/{id}/release",
        "Release a busy or reserved slot",
        None,
        {200: m.ReleasedOut, 404: _E},
        [],
    ),
    (
        "get",
        "/api/rates",
        "Rates with their use of the window, waiters and pauses",
        None,
        {200: m.RatesOut},
        [],
    ),
    ("get", "/api/rates/{name}", "One rate", None, {200: m.RateOnlyOut, 404: _E}, []),
    (
        "get",
        "/api/rates/{name}/waiters",
        "A rate's waiters, by key then in queue order",
        None,
        {200: m.RateWaitersOut, 400: _E, 404: _E},
        [{"name": "key", "in": "query", "schema": {"type": "string", "minLength": 1, "maxLength": 200}}],
    ),
    (
        "put",
        "/api/rates/{name}/limit",
        "Override the rate's limit (null resets)",
        m.RateLimitBody,
        {200: m.RateOnlyOut, 400: _E, 404: _E, 413: _E, 422: _E},
        [],
    ),
    (
        "post",
        "/api/rates/{name}/pause",
        "Pause the rate (or one key) for a duration",
        m.PauseBody,
        {200: m.RateOnlyOut, 400: _E, 404: _E, 413: _E, 422: _E},
        [],
    ),
    (
        "post",
        "/api/rates/{name}/resume",
        "End a pause of the rate (or one key) now",
        m.ResumeBody,
        {200: m.RateOnlyOut, 400: _E, 404: _E, 413: _E, 422: _E},
        [],
    ),
    ("get", "/api/schedules", "Cron schedules", None, {200: m.SchedulesOut}, []),
    (
        "post",
        "/api/schedules",
        "Create or redefine a schedule",
        m.ScheduleBody,
        {201: m.ScheduleOnlyOut, 400: _E, 404: _E, 413: _E, 422: _E},
        [],
    ),
    ("delete", "/api/schedules/{name}", "Delete a schedule", None, {200: m.DeletedOut, 404: _E}, []),
]

_SIGNAL_PAYLOAD = {
    "description": "any JSON value (empty: null)",
    "required": False,
    "content": {"application/json": {"schema": {}}},
}


@cache
def openapi_document() -> dict[str, Any]:
    used = sorted(
        {model for op in _operations() for model in (op[3], *op[4].values()) if model is not None},
        key=lambda model: model.__name__,
    )
    modes: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (model, "validation" if issubclass(model, m.Body) else "serialization") for model in used
    ]
    _, defs = models_json_schema(modes, ref_template="#/components/schemas/{model}")
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary, body, answers, query in _operations():
        parameters = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
            for name in _path_names(path)
        ] + query
        operation: dict[str, Any] = {
            "summary": summary,
            "operationId": f"{method}_{path.strip('/').replace('/', '_')}",
            "parameters": parameters,
            "responses": {
                str(status): {
                    "description": summary if status < 300 else "error",
                    "content": {
                        "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
                    },
                }
                for status, model in answers.items()
            },
        }
        if 503 in answers:
            operation["responses"]["503"]["headers"] = _RETRY_AFTER
        if body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": f"#/components/schemas/{body.__name__}"}}
                },
            }
        elif path.endswith("/signals/{name}"):
            operation["requestBody"] = _SIGNAL_PAYLOAD
        paths.setdefault(path, {})[method] = operation
    paths["/api/events"] = {
        "get": {
            "summary": "Live events (text/event-stream): run, limits, reload",
            "operationId": "get_api_events",
            "responses": {
                "200": {"description": "an event stream", "content": {"text/event-stream": {"schema": _STR}}},
                "503": {
                    "description": "the server serves its most live streams already",
                    "headers": _RETRY_AFTER,
                    "content": {
                        "application/json": {"schema": {"$ref": f"#/components/schemas/{_E.__name__}"}}
                    },
                },
            },
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "duro",
            "version": "0.1.0",
            "description": "The duro dev server's API: workflows, runs, limits, rates, schedules. See docs/api.md.",
        },
        "paths": paths,
        "components": {
            "schemas": defs.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _operations() -> list[Operation]:
    """The table, each operation that needs the project or the store with its 503."""
    return [
        (
            method,
            path,
            summary,
            body,
            answers if path in _NO_STORE else {**answers, 503: m.UnavailableOut},
            query,
        )
        for method, path, summary, body, answers, query in OPERATIONS
    ]


def _path_names(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]
