"""``/api/workflows``: what can be started (with each input's JSON Schema), and starting runs."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from duro import Concurrency, DuroError, RunIdConflictError
from duro.tooling import WorkflowSpec, start_info, version_order

from ._common import ApiError, answer, duro_error, engine, read_body
from .models import QuotaOut, RunCreatedOut, RunOut, StartBody, VersionOut, WorkflowOut, WorkflowsOut


def _versions(
    spec: WorkflowSpec, registered: set[str], unfinished: dict[tuple[str, str], int]
) -> list[VersionOut]:
    """The versions this server has code for, and those only the store's unfinished runs name (a
    run of version "1" when the code is at "2" waits ``pending`` for a worker that has version 1),
    newest first."""
    seen = registered | {version for (name, version) in unfinished if name == spec.name}
    return [
        VersionOut(
            version=version,
            registered=version in registered,
            unfinished=unfinished.get((spec.name, version), 0),
        )
        for version in sorted(seen, key=version_order, reverse=True)
    ]


def _workflow(
    spec: WorkflowSpec, registered: set[str], unfinished: dict[tuple[str, str], int]
) -> WorkflowOut:
    quota = spec.concurrency
    return WorkflowOut(
        name=spec.name,
        version=spec.version,
        takes_input=spec.takes_input,
        input_schema=spec.input.json_schema() if spec.takes_input else None,
        concurrency=None
        if quota is None
        else QuotaOut(
            limit=quota.limit if isinstance(quota.limit, int) else None,
            key_from_input=callable(quota.key),
            statuses=list(quota.count_statuses),
        ),
        on_event=spec.on_event,
        remote=spec.remote,
        serial=spec.serial,
        versions=_versions(spec, registered, unfinished),
    )


async def list_workflows(request: Request) -> Response:
    eng = engine(request)
    specs = eng.workflows
    # a read of the store, off the event loop (as /metrics reads it)
    unfinished = await run_in_threadpool(eng.store.runs.unfinished_by_version, eng.namespace)
    workflows = [
        _workflow(specs[name], {specs[name].version, *eng.workflow_versions(name)}, unfinished)
        for name in sorted(specs)
    ]
    return answer(WorkflowsOut(workflows=workflows))


async def start_run(request: Request) -> Response:
    eng = engine(request)
    name = request.path_params["name"]
    if name not in eng.workflows:
        known = ", ".join(sorted(eng.workflows)) or "none"
        raise ApiError(404, f"workflow {name!r} does not exist; known workflows: {known}")
    body = await read_body(request, StartBody)
    try:
        quota = None
        if body.concurrency is not None:
            quota = Concurrency(key=body.concurrency.key, limit=body.concurrency.limit)
        info, created = await start_info(
            eng, name, body.input, run_id=body.run_id, concurrency=quota, version=body.version
        )
    except RunIdConflictError as err:
        raise ApiError(409, str(err)) from None
    except DuroError as err:  # a quota's 429; an InputError carries the workflow and pydantic's errors
        raise duro_error(err) from None
    return answer(RunCreatedOut(run=RunOut.of(info), created=created), 201 if created else 200)


routes = [
    Route("/api/workflows", list_workflows, methods=["GET"]),
    Route("/api/workflows/{name}/runs", start_run, methods=["POST"]),
]
