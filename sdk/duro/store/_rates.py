"""The store's side of rates: each decision of ``duro.rules._rates`` applied in one transaction.

A rate's waiters queue per key (``''`` for an unkeyed rate), and every decision of a queue first
locks its row in ``duro_rate_keys`` (``SELECT ... FOR UPDATE`` on PostgreSQL; on SQLite ``BEGIN
IMMEDIATE`` serializes writers): the window it reads (the queue's grants of the last ``per_ms``),
the grants it makes and the queue's next due instant cannot interleave with another process's, so
the window's promise holds across processes. Instants are the database server's on PostgreSQL.

A request is queued, then the queue is decided at once: granted in the same transaction when the
window allows (its hook step written completed alongside), else it waits and the queue's
``next_due`` says when its head may go; the expiry pass (:meth:`Rates.due`) decides every
queue whose head is due, and times out waiters past their timeout.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from sqlalchemy.engine import Connection

from ..definitions._config import RateConfig
from ..rules import _rates as rules
from ._commands import OwnStep
from ._connection import Connector
from ._notify import RateNotice
from ._queries import RATE_WAIT_COLUMNS
from ._records import Fenced, StepRecord, reads

_NO_STEPS: Mapping[str, StepRecord] = MappingProxyType({})
_NOBODY: Mapping[str, OwnStep] = MappingProxyType({})
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
    """A rate as the store knows it (:meth:`Rates.states`): as declared by the last engine to start with
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
    as written, the waiters it granted (this request's included), the queue's next due, and the
    hook steps it wrote for the local waiters it granted (see :class:`RatePass`)."""

    wait: RateWaitRow | None
    step: StepRecord | None = None
    granted: tuple[RateWaitRow, ...] = ()
    next_due: int | None = None
    handed: Mapping[str, StepRecord] = _NO_STEPS


class RatePass(NamedTuple):
    """What a pass granted, and the hook steps it wrote completed for the granted waiters of the
    calling process (``local_waiters``: by request id, each fenced on its run), so that they resume
    with nothing more to write."""

    granted: list[RateWaitRow]
    handed: Mapping[str, StepRecord] = _NO_STEPS


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


class Queue(NamedTuple):
    """One queue's row as a decision reads it, locked: its waiters and next place, the costs it ever
    granted (``granted_cum``: what a grant's ``cum`` counts up to), the pauses that hold it (its own
    and its rate's), the rate's limit override, and the instant the decision is judged at."""

    name: str
    key: str
    waiting: int
    next_pos: int
    granted_cum: int
    paused_until: int | None
    limit_override: int | None
    now: int


class Rates:
    """The rates' queues: each call locks one queue's row, decides (``duro.rules._rates``) and writes."""

    def __init__(self, db: Connector) -> None:
        self.db = db

    def _lock_queue(self, conn: Connection, name: str, key: str, now: int) -> Queue:
        """The queue's row, made on first use and locked, and its rate's override and pause. The
        instant is the clock's, and never earlier than the queue's last decision: a transaction
        that read the clock (its caller's, or the server's at its start) and then waited for this
        lock must not judge a window from before grants already committed, or it would not count
        them."""
        params = {"name": name, "key": key, "now": now}
        row = self.db.run(conn, "rate_key_lock", params).fetchone()
        if row is None:
            self.db.run(conn, "rate_insert", params)
            self.db.run(conn, "rate_key_insert", params)
            row = self.db.run(conn, "rate_key_lock", params).fetchone()
        paused, waiting, clock, last, next_pos, cum, override, rate_paused = row
        pauses = [p for p in (paused, rate_paused) if p is not None]
        judged = max(int(clock), int(last))
        return Queue(
            name, key, int(waiting), int(next_pos), int(cum), max(pauses, default=None), override, judged
        )

    def _read_wait(self, conn: Connection, wait_id: str) -> RateWaitRow | None:
        found = self.db.run(conn, "rate_wait_select", {"id": wait_id}).fetchone()
        return None if found is None else RateWaitRow(*found)

    def _decide(
        self,
        conn: Connection,
        config: RateConfig,
        queue: Queue,
        heads: list[RateWaitRow] | None = None,
        own: str | None = None,
        local_waiters: Mapping[str, OwnStep] = _NOBODY,
        read: tuple[int, int] | None = None,
    ) -> tuple[list[RateWaitRow], int | None, dict[str, StepRecord]]:
        """Time out the queue's waiters past their timeout, then grant its heads while the window
        allows (``duro.rules._rates``: from the window's use and, for a head that does not fit, its oldest
        grants); write the grants and the queue's row. ``heads``: the queue's waiters when the caller
        knows them all (a request to an empty queue); ``own``: the caller's request (its run is not
        made due: it is executing); ``local_waiters``: waiters of the calling process with their hook
        steps, written completed when granted (a waiter whose run is not its owner's any more is
        left to its run); ``read``: the waiters the caller timed out and the window's use, when it
        read them already. Returns (granted, next due, the hook steps written)."""
        now = queue.now
        params: dict[str, Any] = {"name": queue.name, "key": queue.key, "now": now}
        since = now - config.per_ms
        if read is None:
            with self.db.pipeline(conn):  # on PostgreSQL one round trip for both
                timing_out = self.db.run(conn, "rate_time_out", params)
                first = self._send_window_start(conn, params, queue.granted_cum, since)
            read = (timing_out.rowcount, self._window_use(queue.granted_cum, first))
        timed_out, used = read
        waiting = queue.waiting - timed_out
        paused = queue.paused_until if queue.paused_until is not None and queue.paused_until > now else None
        view = rules.RateView(config.name, queue.limit_override or config.limit, config.per_ms, paused)
        if heads is None or timed_out:
            n = min(HEADS, view.limit)
            heads = [RateWaitRow(*row) for row in self.db.run(conn, "rate_heads", {**params, "n": n})]
        waiters = [rules.Waiter(row.id, row.pos, row.cost, row.timeout_at) for row in heads]
        cum, granted, made = queue.granted_cum, [], []
        for waiter, row in zip(rules.take_heads(view, used, waiters, now), heads, strict=False):
            cum += waiter.cost
            used += waiter.cost
            granted.append(row._replace(state="granted", granted_at=now, ended_at=now))
            made.append((row.id, cum, rules.Grant(now, waiter.cost)))
        waiting -= len(granted)
        next_due = None
        if len(granted) < len(heads):  # a head that does not fit: when it will
            cost = heads[len(granted)].cost
            room = rules.room_needed(view, used, cost)
            oldest = []
            if room > 0 and cost <= view.limit:  # the window's oldest grants, this decision's last
                found = self.db.run(conn, "rate_oldest", {**params, "since": since, "n": room})
                oldest = [rules.Grant(int(at), int(c)) for at, c in found] + [grant for *_, grant in made]
            next_due = rules.due(view, used, oldest[:room], cost, now)
        elif waiting > 0:
            next_due = now  # more heads than one decision reads: the next pass goes on at once
        update = {
            **params,
            "waiting": waiting,
            "next_due": next_due if waiting > 0 else None,
            "next_pos": queue.next_pos,
            "cum": cum,
        }
        with self.db.pipeline(conn):  # writes whose answers decide nothing: one round trip
            for wait_id, grant_cum, _ in made:
                self.db.run(conn, "rate_grant", {"id": wait_id, "now": now, "cum": grant_cum})
            self.db.run(conn, "rate_key_update", update)
        handed: dict[str, StepRecord] = {}
        for row in granted:  # each fenced on its run: its answer is read
            local = local_waiters.get(row.id)  # a waiter in the caller's process, with its hook step
            if local is None:
                continue
            step = local.step._replace(status="completed", ended_at=now, result=grant_json(row))
            if self.db.write_step(conn, local.run_id, local.owner, step, None, None, now):
                handed[row.id] = step  # its run waits in the caller's memory: not made due, no notice
        told = [row for row in granted if row.id not in handed and row.id != own]
        if told:
            with self.db.pipeline(conn):
                for row in told:
                    if row.run_id is not None:
                        self.db.run(conn, "make_due", {"id": row.run_id, "now": now})
                self.db.notify(conn, *(RateNotice(kind="rate", wait_id=row.id) for row in told))
        return granted, update["next_due"], handed

    def _send_window_start(self, conn: Connection, params: dict[str, Any], cum: int, since: int) -> Any:
        """The window's first grant, sent (``None``: the queue never granted, nothing to read)."""
        if cum == 0:
            return None
        return self.db.run(conn, "rate_window_start", {**params, "since": since})

    @staticmethod
    def _window_use(cum: int, first: Any) -> int:
        """The costs the queue granted in the window: all it ever granted (``cum``), less what it
        had granted before the window's first grant (``first``'s answer: one index lookup)."""
        row = None if first is None else first.fetchone()
        return 0 if row is None else cum - (int(row[0]) - int(row[1]))

    def request(
        self,
        config: RateConfig,
        wait_id: str,
        run_id: str | None,
        key: str | None,
        cost: int,
        timeout_at: int | None,
        now: int,
        hook: OwnStep | None = None,
        local_waiters: Mapping[str, OwnStep] = _NOBODY,
    ) -> RateOutcome:
        """Queue a request for ``cost`` of rate ``config`` (idempotent by ``wait_id``) and decide its
        queue at once. ``hook``, the run's hook step, is written alongside: completed with the grant
        when it was granted now, else as given (waiting). ``timeout_at`` is on the caller's clock;
        ``local_waiters`` as for :meth:`due`."""
        with self.db.write() as conn:
            queue = self._lock_queue(conn, config.name, key or "", now)
            judged = queue.now
            row = RateWaitRow(
                wait_id,
                config.name,
                queue.key,
                run_id,
                cost,
                queue.next_pos,
                "waiting",
                judged,
                None if timeout_at is None else timeout_at + judged - now,
            )
            params = {"name": queue.name, "key": queue.key, "now": judged}
            with self.db.pipeline(conn):  # on PostgreSQL one round trip for the three
                inserting = self.db.run(
                    conn, "rate_wait_insert", dict(zip(RATE_WAIT_COLUMNS, row, strict=True))
                )
                timing_out = self.db.run(conn, "rate_time_out", params)
                first = self._send_window_start(conn, params, queue.granted_cum, judged - config.per_ms)
            read = (timing_out.rowcount, self._window_use(queue.granted_cum, first))
            if inserting.rowcount == 0:  # made before: it stands as it is (its queue decided anew)
                if read[0]:
                    self._decide(
                        conn, config, queue._replace(waiting=queue.waiting - read[0]), read=(0, read[1])
                    )
                return RateOutcome(self._read_wait(conn, wait_id))
            queue = queue._replace(waiting=queue.waiting + 1, next_pos=queue.next_pos + 1)
            heads = [row] if queue.waiting == 1 else None  # alone in its queue: the only head
            granted, next_due, handed = self._decide(conn, config, queue, heads, wait_id, local_waiters, read)
            mine = next((g for g in granted if g.id == wait_id), row)
            step = None
            if hook is not None:
                step = hook.step
                if mine.state == "granted":
                    step = step._replace(status="completed", ended_at=judged, result=grant_json(mine))
                if not self.db.write_step(conn, hook.run_id, hook.owner, step, None, None, judged):
                    raise Fenced(hook.run_id)
        return RateOutcome(mine, step, tuple(granted), next_due, handed)

    def give_up(
        self,
        config: RateConfig,
        wait_id: str,
        now: int,
        hook: OwnStep | None = None,
        cancelled: bool = False,
        local_waiters: Mapping[str, OwnStep] = _NOBODY,
    ) -> RateOutcome:
        """The waiter's timeout passed (``cancelled``: its run was cancelled instead): a waiting
        request leaves its queue (``timed_out``, or ``left``), the queue decided again (the heads
        behind it may go now), and ``hook`` written as given. A request granted meanwhile keeps its
        grant: on a timeout the hook is not written (the caller takes the grant); on a cancel it is."""
        with self.db.write() as conn:
            found = self._read_wait(conn, wait_id)
            if found is None:
                return RateOutcome(None)
            queue = self._lock_queue(conn, config.name, found.key, now)
            judged = queue.now
            mine = self._read_wait(conn, wait_id)  # as it stands under the queue's lock
            assert mine is not None
            granted: list[RateWaitRow] = []
            handed: dict[str, StepRecord] = {}
            if mine.state == "waiting":
                state = "left" if cancelled else "timed_out"
                self.db.run(conn, "rate_wait_end", {"id": wait_id, "state": state, "now": judged})
                mine = mine._replace(state=state, ended_at=judged)
                left = queue._replace(waiting=queue.waiting - 1)
                granted, _, handed = self._decide(conn, config, left, local_waiters=local_waiters)
            elif mine.state == "granted" and not cancelled:
                return RateOutcome(mine)
            step = None
            if hook is not None:
                step = hook.step
                if not self.db.write_step(conn, hook.run_id, hook.owner, step, None, None, judged):
                    raise Fenced(hook.run_id)
        return RateOutcome(mine, step, tuple(granted), None, handed)

    def leave(self, configs: Mapping[str, RateConfig], run_ids: Iterable[str], now: int) -> list[RateWaitRow]:
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
                queue = self._lock_queue(conn, name, key, now)
                params = {"name": name, "key": key, "ids": ids, "now": queue.now}
                left = self.db.run_in(conn, "rate_leave_runs", params).rowcount
                queue = queue._replace(waiting=queue.waiting - left)
                if config is None:  # a rate no longer declared: its queue keeps its count right
                    update = {"waiting": queue.waiting, "next_due": None, "next_pos": queue.next_pos}
                    self.db.run(conn, "rate_key_update", {**params, **update, "cum": queue.granted_cum})
                    continue
                granted += self._decide(conn, config, queue)[0]
        return granted

    def due(
        self, configs: Mapping[str, RateConfig], now: int, local_waiters: Mapping[str, OwnStep] = _NOBODY
    ) -> RatePass:
        """Decide every queue of ``configs`` whose head is due or that has a waiter past its timeout,
        a transaction each; the granted waiters in ``local_waiters`` have their hook steps written
        completed in the same transaction (see :class:`RatePass`)."""
        names = sorted(configs)
        if not names:
            return RatePass([])
        with self.db.single_read() as conn:
            due = {
                tuple(r) for r in self.db.run_in(conn, "rates_due", {"now": now, "names": names, "n": 1000})
            }
            due |= {tuple(r) for r in self.db.run_in(conn, "rate_timeouts_due", {"now": now, "names": names})}
        granted: list[RateWaitRow] = []
        handed: dict[str, StepRecord] = {}
        for name, key in sorted(due):
            with self.db.write() as conn:
                queue = self._lock_queue(conn, name, key, now)
                made, _, wrote = self._decide(conn, configs[name], queue, local_waiters=local_waiters)
            granted += made
            handed |= wrote
        return RatePass(granted, handed)

    def prune(self, configs: Mapping[str, RateConfig], now: int, batch: int = PRUNE_BATCH) -> int:
        """Delete the ended waits of these rates past every window (``per_ms``, and a minute more
        for clocks that differ), a bounded batch per rate in a transaction of its own; a wait of an
        unfinished run stays. Returns how many went."""
        pruned = 0
        for name, config in sorted(configs.items()):
            params = {"name": name, "before": now - config.per_ms - PRUNE_MARGIN_MS, "n": batch}
            with self.db.write() as conn:
                pruned += self.db.run(conn, "rate_prune", params).rowcount
        return pruned

    @reads
    def next_due(self, names: Iterable[str]) -> int | None:
        """The earliest instant a queue of these rates is due (a head's grant or a timeout)."""
        wanted = sorted(names)
        if not wanted:
            return None
        with self.db.single_read() as conn:
            found = self.db.run_in(conn, "next_rate_due", {"names": wanted}).fetchone()[0]
        return None if found is None else int(found)

    def wait_states(self, wait_ids: Iterable[str]) -> dict[str, str]:
        """The state of each known rate request, in one query (a worker polling its waiters)."""
        ids = list(wait_ids)
        if not ids:
            return {}
        with self.db.single_read() as conn:
            return dict(self.db.run_in(conn, "rate_wait_states", {"ids": ids}).fetchall())

    # -- operators -------------------------------------------------------------------------------

    def declare(self, configs: Iterable[RateConfig], now: int) -> None:
        """Write each rate as declared (what a client engine without the project lists)."""
        with self.db.write() as conn:
            for config in configs:
                params = {"name": config.name, "limit": config.limit, "per_ms": config.per_ms, "now": now}
                self.db.run(conn, "rate_declare", {**params, "per_key": config.per_key})

    def states(self, now: int) -> list[RateState]:
        with self.db.single_read() as conn:
            rows = self.db.run(conn, "rate_states", {"now": now}).fetchall()
        return [
            RateState(name, limit, per_ms, bool(per_key), override, paused, int(waiting), int(granted))
            for name, limit, per_ms, per_key, override, paused, waiting, granted in rows
        ]

    def key_state(self, name: str, key: str, per_ms: int, now: int) -> tuple[int, int, int | None]:
        """One queue of a rate: the costs granted in the window ending ``now``, its waiters, and its
        own pause."""
        params = {"name": name, "key": key, "since": now - per_ms}
        with self.db.single_read() as conn:
            granted, waiting, paused = self.db.run(conn, "rate_key_state", params).fetchone()
        return int(granted), int(waiting), paused

    def waiters(self, name: str, key: str | None, most: int) -> list[RateWaitRow]:
        """A rate's waiters, by key then in queue order (of ``key`` only, when given)."""
        query, params = ("rate_waiters", {"name": name, "n": most})
        if key is not None:
            query, params = ("rate_waiters_key", {**params, "key": key})
        with self.db.single_read() as conn:
            return [RateWaitRow(*row) for row in self.db.run(conn, query, params)]

    def set_limit(self, config: RateConfig, limit: int | None, now: int) -> None:
        """Override a rate's limit (``None``: back to the declared one); its queues are decided by
        the next pass (a raised limit grants at once)."""
        with self.db.write() as conn:
            self.db.run(conn, "rate_insert", {"name": config.name, "now": now})
            self.db.run(conn, "rate_set_override", {"name": config.name, "limit": limit, "now": now})
            self.db.run(conn, "rate_queues_due_now", {"name": config.name, "now": now})
            self.db.notify(conn, {"kind": "rates"})

    def pause(
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
            self.db.notify(conn, {"kind": "rates"})
        return until

    @reads
    def get_wait(self, wait_id: str) -> RateWaitRow | None:
        with self.db.single_read() as conn:
            return self._read_wait(conn, wait_id)
