"""The API's request and response bodies (pydantic), separate from the store's schema. They validate
what comes in, shape what goes out, and are the OpenAPI description's components."""

from __future__ import annotations

import dataclasses
import typing
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, create_model

from duro import RunStatus
from duro.tooling import (
    EndState,
    LimitInfo,
    RateInfo,
    RateWaiter,
    RetryState,
    RunInfo,
    ScheduleInfo,
    SlotInfo,
    StepInfo,
    UnfinishedState,
)


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def answer_of(record: type, **changed: Any) -> type[BaseModel]:
    """The base of an answer that shows an SDK record: the record's fields (a dataclass's), in its
    order and with its types, never written again here. ``changed`` gives a field another
    ``(type, default)`` where the API shows it its own way (an error as :class:`RunErrorOut`, a
    status as its literal values), or drops it (``None``)."""
    hints = typing.get_type_hints(record)
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(record):
        spec = changed.get(field.name, (hints[field.name], ...))
        if spec is not None:
            fields[field.name] = spec
    return create_model(f"_{record.__name__}Fields", **fields)


# -- requests --------------------------------------------------------------------------------------


class QuotaBody(Body):
    """A per-start quota: replaces the workflow's own entirely. ``key`` null = unlimited."""

    key: str | None = Field(max_length=256)
    limit: StrictInt = Field(ge=-1_000_000, le=1_000_000)  # true or "3" is a 422, not 1 or 3


class StartBody(Body):
    input: Any = None
    run_id: str | None = Field(default=None, min_length=1, max_length=200)
    concurrency: QuotaBody | None = None
    version: str | None = Field(
        default=None, min_length=1, max_length=64, description="a registered version (default: the newest)"
    )


class CapacityBody(Body):
    """Strict: a JSON integer (never ``true`` or ``"3"``), or null."""

    capacity: StrictInt | None = Field(
        ge=1, le=100_000, description="an integer; null resets to duro.config.py"
    )


class RateLimitBody(Body):
    """Strict: a JSON integer (never ``true`` or ``"3"``), or null."""

    limit: StrictInt | None = Field(
        ge=1, le=1_000_000, description="an integer; null resets to duro.config.py"
    )


class PauseBody(Body):
    """How long to pause, and optionally one key of a keyed rate."""

    duration: StrictStr | StrictInt = Field(
        description="a duration such as '30s' or '5m' (units ms, s, m, h, d in lowercase, no spaces), "
        "or a JSON integer of milliseconds"
    )
    key: str | None = Field(default=None, min_length=1, max_length=200)


class PruneBody(Body):
    """What to prune: finished runs that ended more than ``older_than`` ago."""

    older_than: StrictStr | StrictInt = Field(
        description="a duration such as '30d' (units ms, s, m, h, d in lowercase, no spaces), "
        "or a JSON integer of milliseconds"
    )
    dry_run: StrictBool = Field(default=False, description="count what would go, delete nothing")


class RetryBody(Body):
    """A retry of one run: on its own version, or on another registered ``version``."""

    version: StrictStr | None = Field(default=None, min_length=1, max_length=64)


class ForkBody(Body):
    """A fork of one run: a new run with a copy of its calls before ``from_seq``."""

    from_seq: StrictInt = Field(ge=0, description="the sequence number of the first call to run again")
    run_id: StrictStr | None = Field(
        default=None, min_length=1, max_length=200, description="the new run's id"
    )
    version: StrictStr | None = Field(default=None, min_length=1, max_length=64)


class _BulkBody(Body):
    workflow: StrictStr | None = Field(default=None, min_length=1, max_length=200)
    since: StrictStr | StrictInt | None = Field(
        default=None, description="a duration before now ('2h'), or a JSON integer of milliseconds before now"
    )
    until: StrictStr | StrictInt | None = Field(default=None, description="as since: the window's end")
    dry_run: StrictBool = Field(default=False, description="list the runs it would act on, change nothing")
    limit: StrictInt = Field(default=1000, ge=1, le=100_000)


class RetryRunsBody(_BulkBody):
    """Retry the runs that ended in [since, until) with this status, workflow and error type."""

    status: RetryState | None = "failed"
    error_type: StrictStr | None = Field(default=None, min_length=1, max_length=300)
    version: StrictStr | None = Field(default=None, min_length=1, max_length=64)


class CancelRunsBody(_BulkBody):
    """Cancel the unfinished runs created in [since, until) with this status and workflow."""

    status: UnfinishedState | None = None


class BulkOut(BaseModel):
    run_ids: list[str] = Field(description="the runs acted on (in a dry run: that would be)")
    refused: dict[str, str] = Field(description="run id -> why it was left out")
    dry_run: bool


class BulkOnlyOut(BaseModel):
    report: BulkOut


class ResumeBody(Body):
    key: str | None = Field(default=None, min_length=1, max_length=200)


class MaxHoldBody(Body):
    """Strict: a duration string in duro's spelling, a JSON integer of milliseconds (never ``true``), or null."""

    max_hold: StrictStr | StrictInt | None = Field(
        description="a duration such as '45m' or '2h' (units ms, s, m, h, d in lowercase, no spaces; "
        "at most 30 days), an integer of milliseconds, or null to reset to duro.config.py"
    )


class ScheduleBody(Body):
    name: str = Field(min_length=1, max_length=100)
    workflow: str = Field(min_length=1, max_length=200)
    cron: str = Field(min_length=1, max_length=200)
    input: Any = None
    concurrency: QuotaBody | None = None


# -- responses -------------------------------------------------------------------------------------


class ErrorOut(BaseModel):
    error: str
    message: str


class UnavailableOut(ErrorOut):
    """503: the project failed to load, or the database was busy or out of reach (then ``retry_after``,
    in seconds, as the ``Retry-After`` header says)."""

    retry_after: int | None = None


class RunNotFoundOut(ErrorOut):
    """404: no run has this id (in the server's namespace, when its reads are fenced to it)."""

    run_id: str


class RunEndedOut(ErrorOut):
    """409: the run has ended, so a signal cannot reach it; nothing was sent."""

    run_id: str
    status: EndState


class RunStatusOut(ErrorOut):
    """409: the run's status does not allow it (a retry of a run that has not ended or that
    completed, a fork of a run that has not ended); nothing was changed."""

    run_id: str
    status: Literal[tuple(status.value for status in RunStatus)]  # type: ignore[valid-type]


class InputErrorOut(ErrorOut):
    """422: the request was understood but refused. For an input that does not match the
    workflow's type hint, ``workflow`` names it and ``errors`` is pydantic's list of what is wrong
    (each with ``type``, ``loc``, ``msg`` and ``input``); the body's own fields are told the same way."""

    workflow: str | None = None
    errors: list[dict[str, Any]] = Field(
        default_factory=list, description="pydantic's validation errors; empty when the refusal is not one"
    )


class QuotaErrorOut(ErrorOut):
    """429: a quota refused the start; ``retry_after`` is the seconds to wait, as the ``Retry-After``
    header says."""

    workflow: str
    key: str
    limit: int
    active: int
    retry_after: int


class DivergenceOut(BaseModel):
    seq: int = Field(description="the sequence number where the code and the history part")
    recorded: str = Field(description="the durable call the history recorded there")
    asked: str = Field(description="the durable call the code asks for there now")


class RunErrorOut(BaseModel):
    type: str | None
    message: str | None
    traceback: str | None
    detail: DivergenceOut | None = Field(
        default=None, description="a NonDeterminismError's two calls; null for any other error"
    )


if TYPE_CHECKING:  # the fields are the records' (answer_of); a type checker sees the models
    _RunFields = BaseModel
    _StepFields = BaseModel
    _LimitFields = BaseModel
    _SlotFields = BaseModel
    _RateFields = BaseModel
    _RateWaiterFields = BaseModel
    _ScheduleFields = BaseModel
else:
    _RunFields = answer_of(
        RunInfo,
        status=(Literal[tuple(status.value for status in RunStatus)], ...),  # its values, as the schema says
        error=(RunErrorOut | None, ...),
        tags=(list[str], ...),
    )
    _StepFields = answer_of(StepInfo, error=(RunErrorOut | None, ...))
    _LimitFields = answer_of(LimitInfo)
    _SlotFields = answer_of(SlotInfo, state=(Literal["busy", "reserved", "waiting"], ...), waited=None)
    _ScheduleFields = answer_of(ScheduleInfo)
    _RateFields = answer_of(RateInfo)
    _RateWaiterFields = answer_of(RateWaiter)


class RunOut(_RunFields):
    # A run: duro.RunInfo's fields, and the limit whose queue it waits in.

    queued_for: str | None = Field(
        default=None,
        description="the limit whose queue the run waits in for a slot (its request waiting, or reserved "
        "and not yet confirmed); null when none. Given by the runs list and a run's page; the other "
        "answers leave it null",
    )

    @classmethod
    def of(cls, info: RunInfo, queued_for: str | None = None) -> RunOut:
        return cls.model_validate({**vars(info), "queued_for": queued_for})


class StepOut(_StepFields):
    # A step: duro.StepInfo's fields.

    @classmethod
    def of(cls, info: StepInfo) -> StepOut:
        return cls.model_validate(vars(info))


class RunCreatedOut(BaseModel):
    run: RunOut
    created: bool


class RunOnlyOut(BaseModel):
    run: RunOut


class RunDetailOut(BaseModel):
    run: RunOut
    steps: list[StepOut]
    next_steps_cursor: str | None


class StepPageOut(BaseModel):
    steps: list[StepOut]
    next_cursor: str | None


class RunPageOut(BaseModel):
    runs: list[RunOut]
    next_cursor: str | None


class PruneOut(BaseModel):
    runs: int = Field(description="finished runs deleted (or, in a dry run, that would be)")
    steps: int
    slots: int
    dry_run: bool
    before: datetime = Field(description="the runs that ended before this instant")


class PruneOnlyOut(BaseModel):
    prune: PruneOut


class SignalSentOut(BaseModel):
    sent: bool


class QuotaOut(BaseModel):
    limit: int | None = Field(
        description="the limit when it is a number; null when a function decides it per key"
    )
    key_from_input: bool
    statuses: list[str]


class VersionOut(BaseModel):
    version: str
    registered: bool = Field(
        description="this server has its code; false for a version seen only in the store's runs"
    )
    unfinished: int = Field(description="its runs not yet finished: pending, running, suspended or blocked")


class WorkflowOut(BaseModel):
    name: str
    version: str
    takes_input: bool
    input_schema: dict[str, Any] | None
    concurrency: QuotaOut | None
    on_event: str | None
    remote: bool
    serial: bool
    versions: list[VersionOut] = Field(
        description="every version registered or with unfinished runs, newest registered first"
    )


class WorkflowsOut(BaseModel):
    workflows: list[WorkflowOut]


class LimitOut(_LimitFields):
    # A limit: duro.limits.LimitInfo's fields.

    @classmethod
    def of(cls, info: LimitInfo) -> LimitOut:
        return cls.model_validate(vars(info))


class LimitsOut(BaseModel):
    limits: list[LimitOut]


class LimitOnlyOut(BaseModel):
    limit: LimitOut


class SlotOut(_SlotFields):
    # A slot: duro.limits.SlotInfo's fields, its wait in milliseconds.

    waited_ms: int | None

    @classmethod
    def of(cls, info: SlotInfo) -> SlotOut:
        waited = None if info.waited is None else round(info.waited.total_seconds() * 1000)
        return cls.model_validate({**vars(info), "waited_ms": waited})


class LimitKeyOut(BaseModel):
    # One key of a keyed limit: duro.limits.LimitKey's fields.
    key: str
    capacity: int
    overridden: bool
    busy: int
    reserved: int
    waiting: int


class LimitKeysOut(BaseModel):
    limit: LimitOut
    keys: list[LimitKeyOut]


class LimitKeyOnlyOut(BaseModel):
    limit: str
    key: LimitKeyOut


class RateOut(_RateFields):
    # A rate: duro.rates.RateInfo's fields.

    @classmethod
    def of(cls, info: RateInfo) -> RateOut:
        return cls.model_validate(vars(info))


class RatesOut(BaseModel):
    rates: list[RateOut]


class RateOnlyOut(BaseModel):
    rate: RateOut


class RateWaiterOut(_RateWaiterFields):
    # A waiter of a rate: duro.rates.RateWaiter's fields.
    pass


class RateWaitersOut(BaseModel):
    rate: RateOut
    waiters: list[RateWaiterOut]


class SlotsOut(BaseModel):
    limit: LimitOut
    slots: list[SlotOut]
    next_cursor: str | None = Field(default=None, description="the next page's cursor; null after the last")


class ReleasedOut(BaseModel):
    released: bool
    slot_id: str


class HistoryPoint(BaseModel):
    at: datetime
    busy: int
    waiting: int


class LastHourOut(BaseModel):
    """A limit's last hour, from the store (every process's slots): slots that became held
    (``granted``), the nearest-rank percentiles of their waits from enqueue to held in seconds
    (null when none was granted), slots ``max_hold`` took back (``expired``: lost releases) and
    requests whose timeout passed in the queue (``timed_out``)."""

    granted: int = Field(ge=0)
    wait_p50_s: float | None = Field(ge=0)
    wait_p90_s: float | None = Field(ge=0)
    wait_p99_s: float | None = Field(ge=0)
    expired: int = Field(ge=0)
    timed_out: int = Field(ge=0)

    @classmethod
    def of(cls, stats: Any) -> LastHourOut:
        """From ``engine.limits.stats(name)``."""
        return cls(
            granted=stats.granted,
            wait_p50_s=stats.wait_p50_s,
            wait_p90_s=stats.wait_p90_s,
            wait_p99_s=stats.wait_p99_s,
            expired=stats.expired,
            timed_out=stats.timed_out,
        )


class HistoryOut(BaseModel):
    """The chart's points (this server's samples, over ``minutes``) and the limit's ``last_hour``."""

    points: list[HistoryPoint]
    last_hour: LastHourOut


class ScheduleOut(_ScheduleFields):
    # A schedule: duro.ScheduleInfo's fields.

    @classmethod
    def of(cls, info: ScheduleInfo) -> ScheduleOut:
        return cls.model_validate(vars(info))


class SchedulesOut(BaseModel):
    schedules: list[ScheduleOut]


class ScheduleOnlyOut(BaseModel):
    schedule: ScheduleOut


class DeletedOut(BaseModel):
    deleted: bool


class HealthOut(BaseModel):
    ok: bool
    version: str


class LoadErrorOut(BaseModel):
    message: str
    traceback: str


class StatusOut(BaseModel):
    project: str | None
    database: str | None
    loaded_at: datetime | None
    load_error: LoadErrorOut | None
    reloads: int
    token_required: bool
