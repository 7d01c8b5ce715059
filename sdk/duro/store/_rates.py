"""The store's side of rates: each decision of ``duro._rates`` applied in one transaction.

A rate's waiters queue per key (``''`` for an unkeyed rate), and every decision of a queue first
locks its row in ``duro_rate_keys`` (``SELECT ... FOR UPDATE`` on PostgreSQL; on SQLite ``BEGIN
IMMEDIATE`` serializes writers): the window it reads (the queue's grants of the last ``per_ms``),
the grants it makes and the queue's next due instant cannot interleave with another process's, so
the window's promise holds across processes. Instants are the database server's on PostgreSQL.

A request is queued, then the queue is decided at once: granted in the same transaction when the
window allows (its hook step written completed alongside), else it waits and the queue's
``next_due`` says when its head may go; the expiry pass (:meth:`RateRows.rates_due`) decides every
queue whose head is due, and times out waiters past their timeout.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from sqlalchemy.engine import Connection

from .. import _rates as rules
from .._config import RateConfig
from ._commands import OwnStep
from ._connection import StorePart
from ._queries import RATE_WAIT_COLUMNS
from ._records import Fenced, StepRecord
from ._rows import write_step

HEADS = 1000  # waiters a decision reads at the most (a grant costs at least 1: limit bounds it too)
PRUNE_BATCH = 1000  # ended waits a prune deletes per rate and transaction
PRUNE_MARGIN_MS = 60_000  # kept past a window: the processes' clocks may differ that much


class RateWaitRow(NamedTuple):
    """One ``acquire_rate`` as stored (``RATE_WAIT_COLUMNS``, in order)."""

    id: str
    rate: str
    key: str
    run_id: str | None
    cost: int
    pos: int
    state: str
    enqueued_at: int
    timeout_at: int | None = None
    granted_at: int | None = None
    ended_at: int | None = None


class RateState(NamedTuple):
    """A rate as the store knows it (``rate_states``): as declared by the last engine to start with
    it (``None`` until one did), its override and pause, its waiters and the costs granted in the
    window ending now (every key's, on a keyed rate)."""

    name: str
    limit: int | None
    per_ms: int | None
    per_key: bool
    limit_override: int | None
    paused_until: int | None
    waiting: int
    granted: int


class RateOutcome(NamedTuple):
    """What a rate transaction did: the request as it stands (``None`` if unknown), its hook step
    as written, the waiters it granted (this request's included), and the queue's next due."""

    wait: RateWaitRow | None
    step: StepRecord | None = None
    granted: tuple[RateWaitRow, ...] = ()
    next_due: int | None = None


def grant_json(row: RateWaitRow) -> str:
    """A grant as its hook step's result: what a replay reads back."""
    return json.dumps(
        {
            "rate": row.rate,
            "key": row.key or None,
            "granted_at": row.granted_at,
            "waited_ms": (row.granted_at or 0) - row.enqueued_at,
        }
    )


class RateRows(StorePart):
    """The rates' queues: each call locks one queue's row, decides (``duro._rates``) and writes."""

    def _lock_queue(self, conn: Connection, name: str, key: str, now: int) -> tuple[int | None, int, int]:
        """The queue's row, made on first use and locked: (its own pause, waiting, judged instant:
        the clock, and never earlier than the queue's last decision)."""
        params = {"name": name, "key": key, "now": now}
        row = self.db.run(conn, "rate_key_lock", params).fetchone()
        if row is None:
            self.db.run(conn, "rate_insert", params)
            self.db.run(conn, "rate_key_insert", params)
            row = self.db.run(conn, "rate_key_lock", params).fetchone()
        paused_until, waiting, clock, last = row
        # never before the queue's last decision: a transaction that read the clock (its caller's,
        # or the server's at its start) and then waited for this lock must not judge a window
        # from before grants already committed, or it would not count them
        return paused_until, int(waiting), max(int(clock), int(last))

    def _read_wait(self, conn: Connection, wait_id: str) -> RateWaitRow | None:
        found = self.db.run(conn, "rate_wait_select", {"id": wait_id}).fetchone()
        return None if found is None else RateWaitRow(*found)

    def _decide(
        self, conn: Connection, config: RateConfig, key: str, paused: int | None, waiting: int, now: int
    ) -> tuple[list[RateWaitRow], int | None, int]:
        """Time out the queue's waiters past their timeout, then grant its heads while the window
        allows; write the grants and the queue's row. Returns (granted, next due, waiting)."""
        params: dict[str, Any] = {"name": config.name, "key": key, "now": now}
        waiting -= self.db.run(conn, "rate_time_out", params).rowcount
        limit_override, rate_paused, _ = self.db.run(conn, "rate_read", params).fetchone()
        pauses = [p for p in (paused, rate_paused) if p is not None and p > now]
        view = rules.RateView(
            config.name, limit_override or config.limit, config.per_ms, max(pauses, default=None)
        )
        heads = [
            RateWaitRow(*row)
            for row in self.db.run(conn, "rate_heads", {**params, "n": min(HEADS, view.limit)})
        ]
        window = [
            rules.Grant(int(at), int(cost))
            for at, cost in self.db.run(conn, "rate_window", {**params, "since": now - config.per_ms})
        ]
        queue = [rules.Waiter(row.id, row.pos, row.cost, row.timeout_at) for row in heads]
        decision = rules.grant_due(view, window, queue, now)
        granted = [heads[i]._replace(state="granted", granted_at=now) for i in range(len(decision.granted))]
        for row in granted:
            self.db.run(conn, "rate_grant", {"id": row.id, "now": now})
        waiting -= len(granted)
        next_due = decision.next_due
        if next_due is None and len(granted) == len(heads) == min(HEADS, view.limit) and waiting > 0:
            next_due = now  # more heads than one decision reads: the next pass goes on at once
        update = {**params, "waiting": waiting, "next_due": next_due if waiting > 0 else None}
        self.db.run(conn, "rate_key_update", update)
        for row in granted:
            if row.run_id is not None:
                self.db.run(conn, "nudge", {"id": row.run_id, "now": now})
        self.db.notify(conn, *(["rate", row.id] for row in granted))
        return granted, update["next_due"], waiting

    def request_rate(
        self,
        config: RateConfig,
        wait_id: str,
        run_id: str | None,
        key: str | None,
        cost: int,
        timeout_at: int | None,
        now: int,
        hook: OwnStep | None = None,
    ) -> RateOutcome:
        """Queue a request for ``cost`` of rate ``config`` (idempotent by ``wait_id``) and decide its
        queue at once. ``hook``, the run's hook step, is written alongside: completed with the grant
        when it was granted now, else as given (waiting). ``timeout_at`` is on the caller's clock."""
        queue = key or ""
        with self.db.write() as conn:
            paused, waiting, judged = self._lock_queue(conn, config.name, queue, now)
            existing = self._read_wait(conn, wait_id)
            if existing is not None:
                return RateOutcome(existing)
            pos = int(self.db.run(conn, "rate_read", {"name": config.name}).fetchone()[2])
            self.db.run(conn, "rate_next_pos", {"name": config.name, "next_pos": pos + 1, "now": judged})
            row = RateWaitRow(
                wait_id,
                config.name,
                queue,
                run_id,
                cost,
                pos,
                "waiting",
                judged,
                None if timeout_at is None else timeout_at + judged - now,
            )
            self.db.run(conn, "rate_wait_insert", dict(zip(RATE_WAIT_COLUMNS, row, strict=True)))
            granted, next_due, _ = self._decide(conn, config, queue, paused, waiting + 1, judged)
            mine = next((g for g in granted if g.id == wait_id), row)
            step = None
            if hook is not None:
                step = hook.step
                if mine.state == "granted":
                    step = step._replace(status="completed", ended_at=judged, result=grant_json(mine))
                if not write_step(self.db, conn, hook.run_id, hook.owner, step, None, None, judged):
                    raise Fenced(hook.run_id)
        return RateOutcome(mine, step, tuple(granted), next_due)

    def give_up_rate(
        self, config: RateConfig, wait_id: str, now: int, hook: OwnStep | None = None, cancelled: bool = False
    ) -> RateOutcome:
        """The waiter's timeout passed (``cancelled``: its run was cancelled instead): a waiting
        request leaves its queue (``timed_out``, or ``left``), the queue decided again (the heads
        behind it may go now), and ``hook`` written as given. A request granted meanwhile keeps its
        grant: on a timeout the hook is not written (the caller takes the grant); on a cancel it is."""
        with self.db.write() as conn:
            found = self._read_wait(conn, wait_id)
            if found is None:
                return RateOutcome(None)
            paused, waiting, judged = self._lock_queue(conn, config.name, found.key, now)
            mine = self._read_wait(conn, wait_id)  # as it stands under the queue's lock
            assert mine is not None
            granted: list[RateWaitRow] = []
            if mine.state == "waiting":
                state = "left" if cancelled else "timed_out"
                self.db.run(conn, "rate_wait_end", {"id": wait_id, "state": state, "now": judged})
                mine = mine._replace(state=state, ended_at=judged)
                granted = self._decide(conn, config, found.key, paused, waiting - 1, judged)[0]
            elif mine.state == "granted" and not cancelled:
                return RateOutcome(mine)
            step = None
            if hook is not None:
                step = hook.step
                if not write_step(self.db, conn, hook.run_id, hook.owner, step, None, None, judged):
                    raise Fenced(hook.run_id)
        return RateOutcome(mine, step, tuple(granted))

    def rates_leave(
        self, configs: Mapping[str, RateConfig], run_ids: Iterable[str], now: int
    ) -> list[RateWaitRow]:
        """Runs that ended leave the rates' queues they wait in (a grant made stays counted); each
        queue they leave is decided again. Returns the waiters granted."""
        ids = sorted(set(run_ids))
        if not ids:
            return []
        with self.db.single_read() as conn:
            queues = sorted(tuple(r) for r in self.db.run_in(conn, "rate_queues_of_runs", {"ids": ids}))
        granted: list[RateWaitRow] = []
        for name, key in queues:
            config = configs.get(name)
            with self.db.write() as conn:
                paused, waiting, judged = self._lock_queue(conn, name, key, now)
                params = {"name": name, "key": key, "ids": ids, "now": judged}
                left = self.db.run_in(conn, "rate_leave_runs", params).rowcount
                if config is None:  # a rate no longer declared: its queue keeps its count right
                    self.db.run(
                        conn, "rate_key_update", {**params, "waiting": waiting - left, "next_due": None}
                    )
                    continue
                granted += self._decide(conn, config, key, paused, waiting - left, judged)[0]
        return granted

    def rates_due(self, configs: Mapping[str, RateConfig], now: int) -> list[RateWaitRow]:
        """Decide every queue of ``configs`` whose head is due or that has a waiter past its timeout,
        a transaction each; returns the waiters granted."""
        names = sorted(configs)
        if not names:
            return []
        with self.db.single_read() as conn:
            due = {
                tuple(r) for r in self.db.run_in(conn, "rates_due", {"now": now, "names": names, "n": 1000})
            }
            due |= {tuple(r) for r in self.db.run_in(conn, "rate_timeouts_due", {"now": now, "names": names})}
        granted: list[RateWaitRow] = []
        for name, key in sorted(due):
            with self.db.write() as conn:
                paused, waiting, judged = self._lock_queue(conn, name, key, now)
                granted += self._decide(conn, configs[name], key, paused, waiting, judged)[0]
        return granted

    def prune_rates(self, configs: Mapping[str, RateConfig], now: int, batch: int = PRUNE_BATCH) -> int:
        """Delete the ended waits of these rates past every window (``per_ms``, and a minute more
        for clocks that differ), a bounded batch per rate in a transaction of its own; a wait of an
        unfinished run stays. Returns how many went."""
        pruned = 0
        for name, config in sorted(configs.items()):
            params = {"name": name, "before": now - config.per_ms - PRUNE_MARGIN_MS, "n": batch}
            with self.db.write() as conn:
                pruned += self.db.run(conn, "rate_prune", params).rowcount
        return pruned

    def next_rate_due(self, names: Iterable[str]) -> int | None:
        """The earliest instant a queue of these rates is due (a head's grant or a timeout)."""
        wanted = sorted(names)
        if not wanted:
            return None
        with self.db.single_read() as conn:
            found = self.db.run_in(conn, "next_rate_due", {"names": wanted}).fetchone()[0]
        return None if found is None else int(found)

    def rate_wait_states(self, wait_ids: Iterable[str]) -> dict[str, str]:
        """The state of each known rate request, in one query (a worker polling its waiters)."""
        ids = list(wait_ids)
        if not ids:
            return {}
        with self.db.single_read() as conn:
            return dict(self.db.run_in(conn, "rate_wait_states", {"ids": ids}).fetchall())

    # -- operators -------------------------------------------------------------------------------

    def declare_rates(self, configs: Iterable[RateConfig], now: int) -> None:
        """Write each rate as declared (what a client engine without the project lists)."""
        with self.db.write() as conn:
            for config in configs:
                params = {"name": config.name, "limit": config.limit, "per_ms": config.per_ms, "now": now}
                self.db.run(conn, "rate_declare", {**params, "per_key": config.per_key})

    def rate_states(self, now: int) -> list[RateState]:
        with self.db.single_read() as conn:
            rows = self.db.run(conn, "rate_states", {"now": now}).fetchall()
        return [
            RateState(name, limit, per_ms, bool(per_key), override, paused, int(waiting), int(granted))
            for name, limit, per_ms, per_key, override, paused, waiting, granted in rows
        ]

    def rate_key_state(self, name: str, key: str, per_ms: int, now: int) -> tuple[int, int, int | None]:
        """One queue of a rate: the costs granted in the window ending ``now``, its waiters, and its
        own pause."""
        params = {"name": name, "key": key, "since": now - per_ms}
        with self.db.single_read() as conn:
            granted, waiting, paused = self.db.run(conn, "rate_key_state", params).fetchone()
        return int(granted), int(waiting), paused

    def rate_waiters(self, name: str, key: str | None, most: int) -> list[RateWaitRow]:
        """A rate's waiters, by key then in queue order (of ``key`` only, when given)."""
        query, params = ("rate_waiters", {"name": name, "n": most})
        if key is not None:
            query, params = ("rate_waiters_key", {**params, "key": key})
        with self.db.single_read() as conn:
            return [RateWaitRow(*row) for row in self.db.run(conn, query, params)]

    def set_rate_limit(self, config: RateConfig, limit: int | None, now: int) -> None:
        """Override a rate's limit (``None``: back to the declared one); its queues are decided by
        the next pass (a raised limit grants at once)."""
        with self.db.write() as conn:
            self.db.run(conn, "rate_insert", {"name": config.name, "now": now})
            self.db.run(conn, "rate_set_override", {"name": config.name, "limit": limit, "now": now})
            self.db.run(conn, "rate_queues_due_now", {"name": config.name, "now": now})
            self.db.notify(conn, ["rates"])

    def pause_rate(
        self, name: str, key: str | None, until: int | None, now: int, extend: bool = False
    ) -> int | None:
        """Pause a rate (``key``: one key of it) until ``until``; ``None`` resumes it; ``extend``: a
        longer pause already set stands (a downstream's 429). A resume makes its queues due now; a
        pause holds every grant until it ends (each decision reads it). Returns the pause's end."""
        params = {"name": name, "key": key or "", "until": until, "now": now}
        with self.db.write() as conn:
            self.db.run(conn, "rate_insert", params)
            if key is not None:
                self.db.run(conn, "rate_key_insert", params)
            query = "rate_pause" if key is None else "rate_key_pause"
            if extend and until is not None:
                until = int(self.db.run(conn, f"{query}_extend", params).fetchone()[0])
            else:
                self.db.run(conn, query, params)
            if until is None:
                self.db.run(conn, "rate_queues_due_now", params)
            self.db.notify(conn, ["rates"])
        return until

    def get_rate_wait(self, wait_id: str) -> RateWaitRow | None:
        with self.db.single_read() as conn:
            return self._read_wait(conn, wait_id)
