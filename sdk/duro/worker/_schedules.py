"""Persisted cron schedules: ``engine.schedules.create / list / get / delete`` and their firing.

Cron expressions are read by croniter, in UTC. A schedule fires each window once across every
worker (claiming a window is one conditional update); the run's id is ``schedule:<name>:<window>``,
so a retried fire never starts a second run. The schedule's own quota (a ``Concurrency`` with a plain
key and limit), or else the workflow's, applies: an over-limit window is skipped and the refusal is
kept as the schedule's ``last_error``. After downtime, a schedule fires once for its oldest missed
window, then goes on from the next window after now (no backfill of every missed window).
"""

from __future__ import annotations

import asyncio
import builtins
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .._clock import Clock, datetime_to_ms, ms_to_datetime
from .._errors import DuroError
from .._serde import Codec
from ..client._starts import Starter
from ..definitions._definitions import Concurrency, Registry
from ..store import ScheduleRecord
from ._gateway import StoreGateway, store_trouble
from ._wakeups import Wakeups

SCHEDULE_NAME = re.compile(r"^[A-Za-z0-9._:-]{1,100}\Z")
_JSON = Codec(None)


@dataclass(frozen=True)
class ScheduleInfo:
    """A schedule as stored: its workflow, cron, input, quota, next window and last outcome."""

    name: str
    workflow: str
    cron: str
    input: Any
    concurrency: dict[str, Any] | None
    next_fire_at: datetime
    last_fire_at: datetime | None
    last_run_id: str | None
    last_error: str | None

    @classmethod
    def of(cls, rec: ScheduleRecord) -> ScheduleInfo:
        """The schedule as users see it, from the store's record."""
        return cls(
            name=rec.name,
            workflow=rec.workflow,
            cron=rec.cron,
            input=_JSON.load(rec.input),
            concurrency=None if rec.concurrency is None else json.loads(rec.concurrency),
            next_fire_at=ms_to_datetime(rec.next_fire_at),
            last_fire_at=ms_to_datetime(rec.last_fire_at),
            last_run_id=rec.last_run_id,
            last_error=rec.last_error,
        )


def next_window(cron: str, after_ms: int) -> int:
    """The first cron window strictly after ``after_ms`` (UTC)."""
    from croniter import croniter  # loaded by the first schedule, not by every engine

    return datetime_to_ms(croniter(cron, ms_to_datetime(after_ms)).get_next(datetime))


def _stored_quota(name: str, concurrency: Concurrency | None) -> str | None:
    if concurrency is None:
        return None
    if not isinstance(concurrency, Concurrency):
        raise DuroError(
            f"schedule {name!r}: concurrency must be a Concurrency(key=..., limit=...), got {concurrency!r}"
        )
    if not (concurrency.key is None or isinstance(concurrency.key, str)) or not isinstance(
        concurrency.limit, int
    ):
        raise DuroError(
            f"schedule {name!r}: its quota is stored, so its key must be a string (or None) and "
            f"its limit an int, not functions"
        )
    return json.dumps(
        {
            "key": concurrency.key,
            "limit": concurrency.limit,
            "count_statuses": list(concurrency.count_statuses),
        }
    )


def _quota_of(rec: ScheduleRecord) -> Concurrency | None:
    if rec.concurrency is None:
        return None
    data = json.loads(rec.concurrency)
    return Concurrency(key=data["key"], limit=data["limit"], count_statuses=data["count_statuses"])


class Schedules:
    """``engine.schedules``: create, list, get and delete persisted cron schedules."""

    def __init__(
        self,
        *,
        registry: Registry,
        gateway: StoreGateway,
        starter: Starter,
        clock: Clock,
        namespace: str,
        changed: Callable[[], None],
    ) -> None:
        self._registry = registry
        self._gateway = gateway
        self._starter = starter
        self._clock = clock
        self._namespace = namespace
        self._changed = changed  # tells the worker of this engine, if it runs, to look again

    async def create(
        self,
        name: str,
        workflow: Any,
        cron: str,
        input: Any = None,  # noqa: A002 - the schedule's input, as everywhere in duro
        concurrency: Concurrency | None = None,
    ) -> ScheduleInfo:
        """Create schedule ``name`` (or redefine it: a deploy can run this every time) to start
        ``workflow`` with ``input`` at every window of ``cron`` (UTC)."""
        if not isinstance(name, str) or not SCHEDULE_NAME.match(name):
            raise DuroError(
                f"schedule name {name!r} is invalid: use 1 to 100 letters, digits, '.', '_', ':' or '-'"
            )
        from croniter import croniter

        if not isinstance(cron, str) or not croniter.is_valid(cron):
            raise DuroError(
                f"schedule {name!r}: cron {cron!r} is not a valid cron expression; "
                f"e.g. '*/15 * * * *' (every 15 minutes, UTC)"
            )
        spec = self._registry.spec_for(workflow)
        _, input_json = spec.prepare_input(input)
        now = self._clock.now_ms()
        record = ScheduleRecord(
            namespace=self._namespace,
            name=name,
            workflow=spec.name,
            cron=cron,
            input=input_json,
            concurrency=_stored_quota(name, concurrency),
            next_fire_at=next_window(cron, now),
            last_fire_at=None,
            last_run_id=None,
            last_error=None,
            created_at=now,
            updated_at=now,
        )
        await self._gateway.call(self._gateway.store.schedules.put, record)
        self._changed()
        return await self.get(name)

    async def list(self) -> builtins.list[ScheduleInfo]:
        """The namespace's schedules, by name."""
        store = self._gateway.store
        return [
            ScheduleInfo.of(rec) for rec in await self._gateway.call(store.schedules.all, self._namespace)
        ]

    async def get(self, name: str) -> ScheduleInfo:
        """The schedule ``name``, or a clear error."""
        for info in await self.list():
            if info.name == name:
                return info
        raise DuroError(f"schedule {name!r} does not exist; list them with engine.schedules.list()")

    async def delete(self, name: str) -> None:
        """Delete the schedule ``name`` (its runs stay as they are)."""
        valid = isinstance(name, str) and SCHEDULE_NAME.match(name)  # else no schedule has it (nor NUL)
        store = self._gateway.store
        if not valid or not await self._gateway.call(store.schedules.delete, self._namespace, name):
            raise DuroError(f"schedule {name!r} does not exist; list them with engine.schedules.list()")
        self._changed()

    async def fire_due(self) -> int | None:
        """Fire every due window of the namespace's schedules (of workflows whose code this process
        has); returns the next window to wait for."""
        gateway, store, namespace = self._gateway, self._gateway.store, self._namespace
        now = self._clock.now_ms()
        names = self._registry.local_names
        for rec in await gateway.call(store.schedules.due, namespace, names, now):
            following = next_window(rec.cron, max(rec.next_fire_at, now))
            if not await gateway.call(
                store.schedules.claim_window, namespace, rec.name, rec.next_fire_at, following, now
            ):
                continue  # another worker fired this window
            run_id: str | None = f"schedule:{rec.name}:{rec.next_fire_at}"
            error = None
            try:
                await self._starter.start(
                    rec.workflow, _JSON.load(rec.input), run_id=run_id, concurrency=_quota_of(rec)
                )
            except DuroError as err:
                run_id, error = None, str(err)
            await gateway.call(store.schedules.record_outcome, namespace, rec.name, now, run_id, error)
        return await gateway.call(store.schedules.next_due, namespace, names)


async def fire_schedules(
    schedules: Schedules, wakeups: Wakeups, changed: asyncio.Event, poll_ms: int | None
) -> None:
    """A worker's schedule loop: fire due schedule windows; sleep until the next one, a change
    (``changed``), or the periodic pass."""
    clock = wakeups.clock
    while True:
        changed.clear()
        try:
            next_due = await schedules.fire_due()
        except Exception as err:  # noqa: BLE001 - the store out of reach for a moment: again soon
            store_trouble("the schedules pass", err)
            next_due = clock.now_ms() + 1000
        now = clock.now_ms()
        deadlines = [d for d in (next_due, None if poll_ms is None else now + poll_ms) if d is not None]
        await wakeups.wait_for(changed.wait(), min(deadlines) if deadlines else None)
