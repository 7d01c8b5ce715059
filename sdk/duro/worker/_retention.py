"""Retention: finished runs deleted once they are older than the workspace's ``retention``, in the
background, and ``engine.prune`` on demand — both a bounded batch per transaction (see
``store._runs``)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime

from .._clock import Clock, ms_to_datetime
from .._durations import Duration, format_ms, to_ms
from .._errors import DuroError
from .._events import EventBus
from ..store import Prune, PruneBatch
from ._gateway import StoreGateway, store_trouble

log = logging.getLogger("duro.retention")

BATCH = 500  # runs a transaction deletes: milliseconds of its locks, never a long transaction
SQLITE_BATCH = 200  # on SQLite a batch holds the only write lock: a smaller one
# After a batch, a pause of PACE times the batch's own duration and at least PAUSE_MS: the database's
# time (and a core) go to starts and steps first, and another process waiting for SQLite's write
# lock, which sleeps in steps of milliseconds, gets it
PACE = 6
PAUSE_MS = 25
RETRY_MS = 60_000  # a pass that failed (the store out of reach) runs again after this


@dataclass(frozen=True)
class PruneReport:
    """What a prune deleted (``dry_run``: would delete): finished runs that ended before ``before``,
    their steps and their slots (signals go with their runs, uncounted)."""

    runs: int
    steps: int
    slots: int
    dry_run: bool
    before: datetime


def next_pass_at(now: int, retention_ms: int, next_end: int | None) -> int:
    """When the background pass runs next: when the oldest finished run it left passes the
    retention, and at the latest one retention from now (a run that ends after ``now`` passes it
    no earlier)."""
    latest = now + retention_ms
    return latest if next_end is None else max(now + 1, min(latest, next_end + retention_ms + 1))


class Retention:
    """``engine.prune`` and the worker's background pass, over one namespace."""

    def __init__(self, *, gateway: StoreGateway, clock: Clock, events: EventBus, namespace: str) -> None:
        self._gateway = gateway
        self._store = gateway.store
        self._clock = clock
        self._events = events
        self._namespace = namespace

    async def prune(self, older_than: Duration, dry_run: bool = False) -> PruneReport:
        """Delete (``dry_run``: count) the finished runs that ended more than ``older_than`` ago."""
        older_than_ms = to_ms(older_than, "prune older_than")
        if not isinstance(dry_run, bool):
            raise DuroError(f"prune dry_run must be True or False, got {dry_run!r}")
        report = await self._pass(older_than_ms, dry_run, wait=True)
        assert report is not None  # a pass that waits for another pruner always ends with a report
        return report

    async def _pass(self, older_than_ms: int, dry_run: bool, wait: bool) -> PruneReport | None:
        """Every batch from the oldest end up; ``None`` if another worker prunes (``wait=False``)."""
        cutoff = self._clock.now_ms() - older_than_ms
        size = SQLITE_BATCH if self._store.dialect == "sqlite" else BATCH
        runs = steps = slots = 0
        after = (-1, "")
        while True:
            prune = Prune(self._namespace, cutoff, after, size, dry_run, wait)
            began = self._clock.monotonic_ms()
            batch: PruneBatch | None = await self._gateway.call(self._store.runs.prune, prune)
            if batch is None:
                return None
            runs, steps, slots = runs + batch.runs, steps + batch.steps, slots + batch.slots
            if batch.last is None:
                return PruneReport(runs, steps, slots, dry_run, ms_to_datetime(cutoff))
            after = batch.last
            if batch.runs and not dry_run:
                self._done(batch, cutoff)
                took = self._clock.monotonic_ms() - began  # 0 on the harness's simulated clock
                if took > 0:
                    await asyncio.sleep(max(took * PACE, PAUSE_MS) / 1000)

    def _done(self, batch: PruneBatch, cutoff: int) -> None:
        before = ms_to_datetime(cutoff).isoformat()
        log.info(
            "pruned %d finished runs (%d steps, %d slots) that ended before %s",
            batch.runs,
            batch.steps,
            batch.slots,
            before,
            extra={
                "event": "runs.pruned",
                "runs": batch.runs,
                "steps": batch.steps,
                "slots": batch.slots,
                "before": before,
            },
        )
        self._events.publish("runs.pruned", "", self._clock.now_ms(), None, runs=batch.runs)

    async def loop(self, retention_ms: int) -> None:
        """The background pass: the runs past ``retention_ms`` deleted, then a sleep until the next
        finished run passes it. On PostgreSQL a worker gives way to another one's pass."""
        while True:
            now = self._clock.now_ms()
            try:
                await self._pass(retention_ms, False, wait=False)
                next_end = await self._gateway.call(
                    self._store.runs.next_prune_due, self._namespace, now - retention_ms
                )
                due = next_pass_at(now, retention_ms, next_end)
            except Exception as err:  # noqa: BLE001 - the store out of reach for a moment: again soon
                store_trouble(f"the retention pass ({format_ms(retention_ms)})", err)
                due = now + RETRY_MS
            await self._clock.sleep_until(due)
