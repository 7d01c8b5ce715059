"""``/api/workflows``: what can be started (with each input's JSON Schema), and starting runs."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from duro import Concurrency, ConcurrencyLimitError, DuroError, RunIdConflictError
from duro.contrib.starlette import RETRY_AFTER_SECONDS, concurrency_limit_body
from duro.tooling import WorkflowSpec

from ._common import ApiError, answer, engine, read_body
from .models import QuotaOut, RunCreatedOut, RunOut, StartBody, WorkflowOut, WorkflowsOut


def _workflow(spec: WorkflowSpec) -> WorkflowOut:
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
    )


async def list_workflows(request: Request) -> Response:
    specs = engine(request).workflows
    return answer(WorkflowsOut(workflows=[_workflow(specs[name]) for name in sorted(specs)]))


async def start_run(request: Request) -> Response:
    eng = engine(request)
    name = request.path_params["name"]
    if name not in eng.workflows:
        known = ", ".join(sorted(eng.workflows)) or "none"
        raise ApiError(404, f"workflow {name!r} does not exist; known workflows: {known}")
    body = await read_body(request, StartBody)
    quota = None
    if body.concurrency is not None:
        quota = Concurrency(key=body.concurrency.key, limit=body.concurrency.limit)
    try:
        handle, created = await eng.start_run(name, body.input, run_id=body.run_id, concurrency=quota)
    except ConcurrencyLimitError as err:
        # the body duro.contrib.starlette answers with too; error_response puts back its first two fields
        refusal = concurrency_limit_body(err)
        fields = {name: value for name, value in refusal.items() if name not in ("error", "message")}
        raise ApiError(
            429, refusal["message"], headers={"Retry-After": RETRY_AFTER_SECONDS}, **fields
        ) from None
    except RunIdConflictError as err:
        raise ApiError(409, str(err)) from None
    except DuroError as err:
        raise ApiError(422, str(err)) from None
    run = RunOut.of(await eng.get_run(handle.id))
    return answer(RunCreatedOut(run=run, created=created), 201 if created else 200)


routes = [
    Route("/api/workflows", list_workflows, methods=["GET"]),
    Route("/api/workflows/{name}/runs", start_run, methods=["POST"]),
]
