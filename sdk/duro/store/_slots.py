"""The store's side of limits: each slot decision (``duro.rules._slots``) applied in one transaction.

Every slot transaction first locks the limit's row (``SELECT ... FOR UPDATE`` on PostgreSQL; on
SQLite ``BEGIN IMMEDIATE`` already serializes writers), so with many processes the counts read, the
decision and its writes cannot interleave: busy + reserved never exceeds capacity, and no slot is
lost or granted twice. Counts live on the limit's row and the queue is read through an index on
``(limit_name, state, pos)``, so an operation's cost does not grow with the queue's length.

A limit's configuration (capacity and max hold from ``duro.config.py``) is passed in as
``LimitConfig``; operator overrides on the row win over it until reset.

A keyed limit's keys (``duro_limit_keys``, see ``_tables.LimitKeyRow``): each key has a row while it has a busy, reserved or waiting slot (or an operator's capacity): its
counts, and while it has room its oldest waiter's position (``open_pos``). A key left with nothing
keeps its row a while (its next slot updates it in place: no row and index entries written and
erased at every pair), until the expiry pass prunes idle keys, once a minute at most. So a grant pass reads the
keys that can take a slot, oldest waiter first, and only those keys' first waiters: 100,000 waiters
behind 10,000 full keys cost what 100 do. A request reads its own key's row, never counts slots.

Every slot decision of a keyed limit writes its keys' changes in its own transaction, under the
limit's lock, so the rows never disagree with the slots. When a limit's ``per_key``
changes (``duro.config.py`` on a reload, a worker started with another config), its keys are counted
again from its slots by the first transaction that locks it with the new value. Two workers that
disagree on ``per_key`` (a rolling deploy) count them again at each other's turn: correct, slower,
until one config is left.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy.engine import Connection

from ..definitions._config import LimitConfig
from ..rules import _slots as rules
from ..rules._slots import Decision, KeyView, LimitView, SlotEvent, SlotRow, slot_json
from ._commands import (
    Claimer,
    ConfirmSlot,
    GiveUpSlot,
    OwnStep,
    ReleaseSlot,
    RequestSlot,
    SlotCommand,
    SlotOutcome,
)
from ._connection import Connector, limit_view, slot_row, slot_values, step_values, to_run
from ._notify import SlotNotice
from ._queries import COUNT_KEYS
from ._records import Fenced, RunRecord, StepRecord, bulk, reads

log = logging.getLogger("duro.store")

GRANT_BATCH = 1000  # grants a transaction at the most, when a capacity raise frees many slots

KEYLESS = ""  # the key row of a keyed limit's slots without a key (queued before it was keyed)
PRUNE_MS = 60_000  # idle keys' rows are pruned this often at the most (see Slots._prune_keys)


def _key_view(per_key: int, row: Sequence[Any] | None) -> KeyView:
    """A key's row (``_KEY_COUNTS`` after the key: override, busy, reserved, waiting) as a decision
    reads it; no row is a key with nothing active and no override."""
    if row is None:
        return KeyView(per_key)
    override, busy, reserved, waiting = row
    return KeyView(override or per_key, int(busy), int(reserved), int(waiting))


class Opened(NamedTuple):
    """A slot operation's reads (see ``Slots._open``)."""

    view: LimitView
    judged: int  # the instant to judge by
    slot: SlotRow | None
    fence: int | None  # how many runs the hook's fence touched (None without a hook)
    key: KeyView | None = None  # the request's key as stored (a keyed limit's request)


class Slots:
    """The limits' slots: each call locks the limit's row, decides (``duro.rules._slots``) and writes."""

    def __init__(self, db: Connector) -> None:
        self.db = db
        self._keys_pruned_at: int | None = None  # when this store last pruned idle keys (see _prune_keys)
        # called with what committed slot decisions did (duro.rules._slots.SlotEvent), in the thread that
        # committed them: the engine's metrics and logs listen here (see duro._observe)
        self.listeners: list[Callable[[Sequence[SlotEvent]], None]] = []

    def tell(self, events: Sequence[SlotEvent]) -> None:
        """Hand what committed decisions did to the listeners."""
        if not events:
            return
        for listener in tuple(self.listeners):
            try:
                listener(events)
            except Exception:  # noqa: BLE001 - an observer must never undo what committed
                log.exception("duro: a slot listener failed; it is dropped")
                self.listeners.remove(listener)

    # -- plumbing --------------------------------------------------------------------------------

    def view(self, conn: Connection, config: LimitConfig, now: int) -> LimitView:
        return self.lock_limit(conn, config, now)[0]

    def lock_limit(self, conn: Connection, config: LimitConfig, now: int) -> tuple[LimitView, int]:
        """The limit's row, created on first use and locked for the rest of the transaction, and the
        instant to judge by (the database's clock on PostgreSQL, read in the same statement)."""
        params = {"name": config.name, "now": now}
        row = self.db.run(conn, "limit_lock", params).fetchone()
        if row is None:
            self.db.run(conn, "limit_insert", params)
            row = self.db.run(conn, "limit_lock", params).fetchone()
        return self._locked(conn, config, row)

    def _locked(self, conn: Connection, config: LimitConfig, row: Sequence[Any]) -> tuple[LimitView, int]:
        """The limit as its row, just locked, says; its keys counted again first if its ``per_key``
        is not the one they were counted for (see ``_keys``)."""
        view, judged = limit_view(config, row)
        if row[-1] != config.per_key:
            self._count_keys(conn, config, judged)
        return view, judged

    def _open(
        self,
        conn: Connection,
        config: LimitConfig,
        slot_id: str,
        hook: OwnStep | None,
        now: int,
        key: str | None = None,
    ) -> Opened:
        """A slot operation's reads, in one round trip on PostgreSQL: the limit's row locked (see
        :meth:`lock_limit`), then under the lock the slot read, the hook's run fenced (how many
        runs the fence touched, ``None`` without a hook: :meth:`_settle` checks it before anything
        is written) and, for a request of a keyed limit, its key's row read."""
        db = self.db
        keyed = key is not None and config.per_key is not None
        with db.pipeline(conn):
            locked = db.run(conn, "limit_lock", {"name": config.name, "now": now})
            answer = db.send_slot_read(conn, slot_id, hook, now)
            key_read = self._send_key_read(conn, config, key) if keyed and key is not None else None
        row = locked.fetchone()
        slot, fence = answer()
        stored = None if key_read is None else key_read()
        if row is None:  # the limit's first use: its row is made, then locked, and the slot read again
            view, judged = self.lock_limit(conn, config, now)
            slot = self._read_slot(conn, slot_id)
        else:
            view, judged = self._locked(conn, config, row)
        if stored is not None and key is not None and (row is None or row[-1] != config.per_key):
            stored = self._key_views(conn, view, [key])[key]  # its keys were just counted again
        return Opened(view, judged, slot, fence, stored)

    def write_decision(self, conn: Connection, decision: Decision, now: int) -> None:
        view, writes = decision.view, decision.writes
        counts = {
            "name": view.name,
            "busy": view.busy,
            "reserved": view.reserved,
            "waiting": view.waiting,
            "next_pos": view.next_pos,
            "now": now,
        }
        if len(writes) == 1 and self.db.dialect == "postgresql":  # one statement for the two
            self.db.run(conn, "slot_upsert_counted", {**slot_values(writes[0]), **counts})
        else:
            for row in writes:
                self.db.run(conn, "slot_upsert", slot_values(row))
            self.db.run(conn, "limit_update", counts)
        if view.per_key is not None:  # a keyed limit's keys (see _keys)
            self._write_keys(conn, decision, now)
        # Waiters in other processes learn at commit that a slot was handed to them (a request that
        # became busy at once is told to its own caller; other changes reach the waiters' own timers).
        self.db.notify(
            conn,
            *(
                SlotNotice(kind="slot", slot_id=row.id, due_at=row.due_at)
                for row in decision.granted
                if row.state == "reserved"
            ),
        )
        # a waiter that may have left memory is due now: its slot was reserved for it, or its wait
        # timed out (a slot granted at once is its caller's own; one handed over in this process
        # went to a run idle here, and a run evicted meanwhile finds it when it is handed back:
        # see _steps.Evict)
        woken = {row.run_id for row in decision.granted if row.state == "reserved"}
        woken.update(row.run_id for row in decision.writes if row.state == "timed_out")
        for run_id in sorted(r for r in woken if r is not None):
            self.db.run(conn, "make_due", {"id": run_id, "now": now})

    def _settle(
        self,
        conn: Connection,
        decision: Decision | None,
        now: int,
        hook: OwnStep | None,
        fence: int | None,
    ) -> None:
        """Write ``decision`` (if any) and the run's hook step, the transaction's last writes: on
        PostgreSQL they go with its commit, in one round trip. The hook's run was fenced when the
        transaction opened (``fence``, see :meth:`_open`): a run that is no longer this worker's
        rolls all of it back, and nothing of this happened."""
        if hook is not None and fence != 1:
            raise Fenced(hook.run_id)
        with self.db.committing(conn, answers=False):
            if decision is not None:
                self.write_decision(conn, decision, now)
            if hook is not None:
                self.db.run(conn, "upsert_step", step_values(hook.run_id, hook.step))

    def grant_heads(
        self,
        conn: Connection,
        decision: Decision,
        now: int,
        waiting_here: Mapping[str, OwnStep] | None = None,
        claimer: Claimer | None = None,
        most: int = GRANT_BATCH,
        handed: dict[str, StepRecord] | None = None,
    ) -> list[RunRecord]:
        """Reserve the queue's heads for the free capacity. Rows this decision already changed are
        read from the decision, not from the table (which does not have them yet).

        ``waiting_here``: the waiters idle in the calling process, by slot id, with their hook steps. A
        head among them takes its slot at once: its hook step is written completed here (fenced on
        its run, like any write of that run), so it wakes holding the slot with nothing to confirm;
        ``handed`` collects those steps as written, by slot id.
        ``claimer``: a head whose run was evicted from memory is taken up by it the same way (see
        ``Claimer``); the runs it took are returned. At most ``most`` grants: a release while a
        raise is under way does not take the rest of the raise into its own transaction."""
        claimed: list[RunRecord] = []
        view = decision.view
        if view.free > 0 and view.waiting > 0:
            changed = {row.id: row for row in decision.writes}
            wanted = min(most, view.free)
            if view.per_key is not None:
                heads = self._keyed_heads(conn, decision, changed, wanted)
            else:
                stored = self.db.run(conn, "queue_heads", {"name": view.name, "n": wanted + len(changed)})
                rows = {row.id: changed.get(row.id, row) for row in map(slot_row, stored)}
                rows.update({row.id: row for row in changed.values() if row.state == "waiting"})
                heads = sorted(
                    (row for row in rows.values() if row.state == "waiting"), key=lambda row: row.pos
                )
            taken = set()
            hooks: Mapping[str, OwnStep] = waiting_here or {}
            for row in rules.next_grants(decision, heads, most) if hooks or claimer else ():
                hook = hooks.get(row.id)
                if hook is None and claimer is not None:
                    hook = self._claim_head(conn, row, claimer, now, claimed)
                if hook is None:
                    continue
                done = hook.step._replace(status="completed", ended_at=now, result=slot_json(row))
                if self.db.write_step(conn, hook.run_id, hook.owner, done, None, None, now):
                    taken.add(row.id)
                    if handed is not None and row.id in hooks:
                        handed[row.id] = done
            rules.grant_heads(decision, heads, now, frozenset(taken), most)
        return claimed

    def _claim_head(
        self, conn: Connection, row: SlotRow, claimer: Claimer, now: int, claimed: list[RunRecord]
    ) -> OwnStep | None:
        """Take up the run of queue head ``row`` for ``claimer`` if nobody holds it (evicted while it
        waits); its hook step, as it waits, to be written completed with the slot."""
        if row.run_id is None:
            return None
        params: dict[str, Any] = {
            "id": row.run_id,
            "owner": claimer.owner,
            "namespace": claimer.namespace,
            "workflows": list(claimer.workflows),
            "now": now,
        }
        if claimer.versions:
            params["versions"] = [tuple(pair) for pair in claimer.versions]
        query = "claim_queued_run_versioned" if claimer.versions else "claim_queued_run"
        taken = self.db.run_in(conn, query, params).fetchone()
        if taken is None:
            return None
        seq = int(row.id.rsplit(".", 1)[1])
        step = self.db.run(conn, "select_step", {"run_id": row.run_id, "seq": seq}).fetchone()
        if step is None:
            return None
        claimed.append(to_run(taken))
        return OwnStep(row.run_id, claimer.owner, StepRecord(*step))

    def _read_slot(self, conn: Connection, slot_id: str) -> SlotRow | None:
        found = self.db.run(conn, "slot_select", {"id": slot_id}).fetchone()
        return None if found is None else slot_row(found)

    # -- a keyed limit's keys ----------------------------------------------------------------------

    def _key_views(self, conn: Connection, view: LimitView, keys: Iterable[str]) -> dict[str, KeyView]:
        """The stored counts of ``keys`` of keyed limit ``view``, each with its capacity in effect."""
        assert view.per_key is not None
        wanted = sorted(set(keys))
        found = self.db.run_in(conn, "key_rows", {"name": view.name, "keys": wanted}).fetchall()
        rows = {row[0]: row[1:] for row in found}
        return {key: _key_view(view.per_key, rows.get(key)) for key in wanted}

    def _send_key_read(self, conn: Connection, config: LimitConfig, key: str) -> Callable[[], KeyView]:
        """Send the read of one key's row (in a pipeline: its answer can wait); the call returned
        gives it, once it is in."""
        assert config.per_key is not None
        per_key = config.per_key
        cursor = self.db.run(conn, "key_row", {"name": config.name, "key": key})

        def stored() -> KeyView:
            row = cursor.fetchone()
            return _key_view(per_key, None if row is None else row[1:])

        return stored

    def _keyed_heads(
        self, conn: Connection, decision: Decision, changed: Mapping[str, SlotRow], wanted: int
    ) -> list[SlotRow]:
        """The waiters granting ``wanted`` slots of a keyed limit may go to, in queue order,
        their keys' counts made known to the decision. Rows this decision changed are read from it.

        The keys that can take a slot are the stored keys with room (oldest waiter first) and the
        keys this decision changed, as they stand now. The oldest ``wanted`` waiters that can be
        granted are among the first ``wanted`` such keys, each giving at most its room: a key past
        them has its oldest waiter behind ``wanted`` grantable waiters already. So the grant pass
        reads ``wanted`` (+ the changed) key rows and as many short queues, one round trip."""
        view = decision.view
        assert view.per_key is not None
        touched = decision.key_changes()
        found = self.db.run(conn, "open_keys", {"name": view.name, "n": wanted + len(touched)}).fetchall()
        stored = {row[0]: _key_view(view.per_key, row[1:]) for row in found}
        unknown = [k for k in touched if k is not None and k not in stored and k not in decision.keys]
        if unknown:
            stored.update(self._key_views(conn, view, unknown))
        decision.know_keys({key: known for key, known in stored.items() if key != KEYLESS})
        again = Counter(row.key for row in changed.values())  # stored rows the decision changed
        reads: list[tuple[str, dict[str, Any]]] = []
        for key in dict.fromkeys([*stored, *(k for k in touched if k is not None)]):
            now = decision.key_view(key) if key != KEYLESS else None
            if now is not None and now.free > 0 and now.waiting > 0:
                params = {"name": view.name, "key": key, "n": min(now.free, wanted) + again[key]}
                reads.append(("key_waiters", params))
        if KEYLESS in stored or None in touched:
            reads.append(("keyless_waiters", {"name": view.name, "n": wanted + again[None]}))
        with self.db.pipeline(conn):
            cursors = [self.db.run(conn, query, params) for query, params in reads]
        rows = {
            row.id: row
            for cursor in cursors
            for row in map(slot_row, cursor.fetchall())
            if row.id not in changed
        }
        rows.update({row.id: row for row in changed.values() if row.state == "waiting"})
        return sorted(rows.values(), key=lambda row: row.pos)

    def _write_keys(self, conn: Connection, decision: Decision, now: int) -> None:
        """The decision's changes to its keys' counts, after its slots (a key's oldest waiter is
        read from them). A key left with nothing keeps its row until :meth:`_prune_keys`."""
        view = decision.view
        assert view.per_key is not None
        changes = decision.key_changes()
        for key in sorted(changes, key=lambda key: key or KEYLESS) if len(changes) > 1 else changes:
            busy, reserved, waiting = changes[key]
            params = {
                "name": view.name,
                "key": KEYLESS if key is None else key,
                "busy": busy,
                "reserved": reserved,
                "waiting": waiting,
                "per_key": view.per_key,
                "now": now,
            }
            self.db.run(conn, "keyless_change" if key is None else "key_change", params)

    def _prune_keys(self, configs: Iterable[LimitConfig], now: int) -> None:
        """Drop the rows of keys with nothing busy, reserved or waiting and no override, of keyed
        limits ``configs``; at most once per ``PRUNE_MS`` (the expiry pass calls it every time). No
        limit's lock: a decision that changes a key at the same moment either finds its row gone
        and makes it again from its own change, or has changed it first, and then it is not idle."""
        keyed = sorted(config.name for config in configs if config.per_key is not None)
        last = self._keys_pruned_at
        if not keyed or (last is not None and 0 <= now - last < PRUNE_MS):
            return
        with self.db.write() as conn:
            for name in keyed:
                self.db.run(conn, "keys_prune", {"name": name})
        self._keys_pruned_at = now

    def _reopen_key(self, conn: Connection, config: LimitConfig, key: str, now: int) -> None:
        """A key's capacity changed: whether it has room (its ``open_pos``) judged again."""
        assert config.per_key is not None
        params = {"name": config.name, "key": key, "per_key": config.per_key, "now": now}
        self.db.run(conn, "key_change", {**params, "busy": 0, "reserved": 0, "waiting": 0})
        self.db.run(conn, "key_drop", params)

    def _count_keys(self, conn: Connection, config: LimitConfig, now: int) -> None:
        """A limit's keys counted again from its slots, for its ``per_key`` now (cleared when it is
        no longer keyed; operators' capacities are kept), under the limit's lock."""
        params = {"name": config.name, "per_key": config.per_key, "now": now}
        for query in COUNT_KEYS if config.per_key is not None else COUNT_KEYS[:2]:
            self.db.run(conn, query, params)
        self.db.run(conn, "limit_per_key", params)

    # -- operations ------------------------------------------------------------------------------

    def apply(self, conn: Connection, command: SlotCommand) -> SlotOutcome:
        """Apply a slot command in the caller's transaction (see :mod:`._commands` for each)."""
        match command:
            case RequestSlot():
                return self._request_slot(conn, command)
            case ConfirmSlot():
                return self._confirm_slot(conn, command)
            case GiveUpSlot():
                return self._give_up_slot(conn, command)
            case ReleaseSlot():
                return self._release_slot(conn, command)

    def _request_slot(self, conn: Connection, command: RequestSlot) -> SlotOutcome:
        """See :class:`RequestSlot`: busy at once when a slot is free and nobody waits, else queued."""
        key = command.key
        view, judged, existing, fence, key_view = self._open(
            conn, command.config, command.slot_id, command.hook, command.now, key
        )
        now = judged
        timeout_at = None if command.timeout_at is None else command.timeout_at + judged - command.now
        if existing is not None:
            return SlotOutcome(existing)
        decision = rules.request(
            view,
            command.slot_id,
            command.run_id,
            command.label,
            timeout_at,
            now,
            view.waiting == 0,
            key if view.per_key is not None else None,
            key_view,
        )
        row = decision.writes[-1]
        hook = command.hook
        if hook is not None:
            granted = row.state == "busy"
            hook = OwnStep(
                hook.run_id,
                hook.owner,
                hook.step._replace(
                    status="completed" if granted else "waiting",
                    ended_at=now if granted else None,
                    result=slot_json(row) if granted else None,
                ),
            )
        self._settle(conn, decision, now, hook, fence)
        queued = decision.view.waiting if row.state == "waiting" else None
        return SlotOutcome(
            row, None if hook is None else hook.step, events=tuple(decision.events), position=queued
        )

    def _confirm_slot(self, conn: Connection, command: ConfirmSlot) -> SlotOutcome:
        """See :class:`ConfirmSlot`: reserved -> busy, or a lapsed reservation requeued."""
        view, now, row, fence, _ = self._open(
            conn, command.config, command.slot_id, command.hook, command.now
        )
        if row is None or row.state != "reserved":
            return SlotOutcome(row)
        decision = rules.confirm(view, row, now)
        self.grant_heads(conn, decision, now)
        confirmed = next(w for w in decision.writes if w.id == command.slot_id)
        hook = command.hook
        if hook is not None and confirmed.state == "busy":
            hook = OwnStep(
                hook.run_id,
                hook.owner,
                hook.step._replace(status="completed", ended_at=now, result=slot_json(confirmed)),
            )
        else:
            hook = None
        self._settle(conn, decision, now, hook, fence)
        return SlotOutcome(
            confirmed,
            None if hook is None else hook.step,
            granted=tuple(decision.granted),
            events=tuple(decision.events),
        )

    def _give_up_slot(self, conn: Connection, command: GiveUpSlot) -> SlotOutcome:
        """See :class:`GiveUpSlot`: the hook step is written failed, also when the expiry pass timed
        the request out first."""
        view, now, row, fence, _ = self._open(
            conn, command.config, command.slot_id, command.hook, command.now
        )
        if command.cancelled:
            return self._leave_cancelled(conn, command, view, row, now, fence)
        if row is None or row.state not in ("waiting", "timed_out"):
            return SlotOutcome(row)
        # timed out already (by the expiry pass): nothing to decide, the hook step is still closed
        decision = rules.give_up(view, row, now) if row.state == "waiting" else None
        self._settle(conn, decision, now, command.hook, fence)
        return SlotOutcome(
            row if decision is None else decision.writes[-1],
            None if command.hook is None else command.hook.step,
            events=() if decision is None else tuple(decision.events),
        )

    def _leave_cancelled(
        self,
        conn: Connection,
        command: GiveUpSlot,
        view: LimitView,
        row: SlotRow | None,
        now: int,
        fence: int | None,
    ) -> SlotOutcome:
        """See ``GiveUpSlot.cancelled``: the request leaves, and what it held goes on at once."""
        if row is None:
            decision = None
        elif row.state == "busy":  # handed to the run as it was cancelled: it never saw it
            decision = rules.release(view, row, now, "run_cancelled")
        else:
            decision = rules.leave(view, row, now)
        if decision is not None:
            self.grant_heads(conn, decision, now)
        self._settle(conn, decision, now, command.hook, fence)
        return SlotOutcome(
            next((written for written in decision.writes if written.id == row.id), row)
            if decision is not None and row is not None
            else row,
            None if command.hook is None else command.hook.step,
            granted=() if decision is None else tuple(decision.granted),
            events=() if decision is None else tuple(decision.events),
        )

    def _release_slot(self, conn: Connection, command: ReleaseSlot) -> SlotOutcome:
        """See :class:`ReleaseSlot`: frees the slot and hands freed capacity to the queue's heads."""
        configs, hook, db = command.configs, command.hook, self.db
        with db.pipeline(conn):  # as _open does, the limit found by the slot's
            locked = db.run(conn, "limit_lock_of_slot", {"id": command.slot_id, "now": command.now})
            answer = db.send_slot_read(conn, command.slot_id, hook, command.now)
        limit = locked.fetchone()
        row, fence = answer()
        if row is None or row.limit not in configs:
            if hook is not None:
                hook = OwnStep(
                    hook.run_id, hook.owner, hook.step._replace(result=json.dumps({"released": False}))
                )
                self._settle(conn, None, db.now(conn, command.now), hook, fence)
            return SlotOutcome(row, None if hook is None else hook.step)
        if limit is None:  # a slot of a limit whose row is gone: made again
            view, now = self.lock_limit(conn, configs[row.limit], command.now)
            row = self._read_slot(conn, command.slot_id) or row
        else:
            view, now = self._locked(conn, configs[row.limit], limit)
        decision = rules.release(view, row, now, command.reason)
        released = bool(decision.writes)
        handed: dict[str, StepRecord] = {}
        claimed = self.grant_heads(conn, decision, now, command.local_waiters, command.claim, handed=handed)
        if hook is not None:
            hook = OwnStep(
                hook.run_id, hook.owner, hook.step._replace(result=json.dumps({"released": released}))
            )
        self._settle(conn, decision, now, hook, fence)
        return SlotOutcome(
            # the released row by id: a reservation requeued and handed straight back is written
            # again, and moves to the end of the writes (see _slots.Decision.put)
            next(written for written in decision.writes if written.id == row.id) if released else row,
            None if hook is None else hook.step,
            released=released,
            granted=tuple(decision.granted),
            handed=handed,
            claimed=tuple(claimed),
            events=tuple(decision.events),
        )

    @bulk
    def leave(self, configs: Mapping[str, LimitConfig], run_ids: Iterable[str], now: int) -> list[SlotRow]:
        """Runs that ended leave the queues they wait in (busy slots they hold stay held). Each one's
        hook step is closed alongside, with the run's end (cancelled, failed) as status and end time.
        Runs go ``GRANT_BATCH`` a transaction (a parent cancelled with 10,000 children waiting)."""
        ended = list(run_ids)
        granted: list[SlotRow] = []
        for start in range(0, len(ended), GRANT_BATCH):
            granted += self._leave_queues(configs, ended[start : start + GRANT_BATCH], now)
        return granted

    def _leave_queues(self, configs: Mapping[str, LimitConfig], ended: list[str], now: int) -> list[SlotRow]:
        granted: list[SlotRow] = []
        events: list[SlotEvent] = []
        with self.db.write() as conn:
            leaving = [
                slot_row(found)
                for run_id in ended
                for found in self.db.run(conn, "run_slots", {"run_id": run_id})
            ]
            # limits locked in name order, as the expiry pass does: two workers whose ended runs wait
            # in the same limits never hold one lock each while waiting for the other's
            for row in sorted(leaving, key=lambda r: (r.limit, r.pos)):
                if row.limit not in configs:
                    continue
                view, judged = self.lock_limit(conn, configs[row.limit], now)  # no clock read if no slot
                row = self._read_slot(conn, row.id) or row  # again, under the limit's lock
                decision = rules.leave(view, row, judged)
                self.grant_heads(conn, decision, judged)
                self.write_decision(conn, decision, judged)
                granted.extend(decision.granted)
                events.extend(decision.events)
            for run_id in ended:  # its request may have timed out meanwhile: not queued, still waited on
                self.db.run(conn, "hook_leave", {"run_id": run_id, "now": now})
        self.tell(events)
        return granted

    @bulk
    def expire(self, configs: Mapping[str, LimitConfig], now: int) -> tuple[list[SlotRow], list[SlotRow]]:
        """Apply every expiry due by ``now`` (max_hold, reservations, timeouts), then hand free
        capacity out (freed by expiries, or added by a larger capacity in the config since the last
        pass). Returns (rows that changed on their own, rows granted).

        A transaction applies at most ``GRANT_BATCH`` expiries and as many grants; while one is
        full, another follows (100,000 reservations lapsing at once, a capacity raised from 1 to
        100,000 in the config): the limits' other operations go on in between."""
        changed: list[SlotRow] = []
        granted: list[SlotRow] = []
        full = True
        while full:
            full = self._expire_slots(configs, now, changed, granted)
        self._prune_keys(configs.values(), now)
        return changed, granted

    def _expire_slots(
        self, configs: Mapping[str, LimitConfig], now: int, changed: list[SlotRow], granted: list[SlotRow]
    ) -> bool:
        """One transaction of the expiry pass; whether it did as much as one may (more may be left)."""
        events: list[SlotEvent] = []
        budget, did = GRANT_BATCH, 0
        with self.db.write() as conn:
            now = self.db.now(conn, now)
            due: dict[str, list[SlotRow]] = {}
            params = {"now": now, "n": GRANT_BATCH, "names": sorted(configs)}
            found = list(self.db.run_in(conn, "due_slots", params)) if configs else []
            for row in map(slot_row, found):
                due.setdefault(row.limit, []).append(row)
            for name, config in sorted(configs.items()):
                if budget <= 0:
                    break
                view = self.view(conn, config, now)
                if name not in due and not (view.free > 0 and view.waiting > 0):
                    continue  # nothing due, nothing to grant (a capacity raised in the config is)
                # read before the lock: another worker's pass may have applied them since
                fresh = [
                    row for row in (self._read_slot(conn, r.id) for r in due.get(name, [])) if row is not None
                ]
                decision = rules.expire(view, fresh, now)
                changed.extend(decision.writes)
                self.grant_heads(conn, decision, now, most=budget)
                self.write_decision(conn, decision, now)
                budget -= len(decision.granted)
                did += len(decision.writes)
                granted.extend(decision.granted)
                events.extend(decision.events)
        self.tell(events)
        return did > 0 and (len(found) == GRANT_BATCH or budget <= 0)

    @reads
    def next_due(self, now: int | None = None, limits: Iterable[str] | None = None) -> int | None:
        """The earliest instant a slot is due, on the caller's clock when ``now`` (the caller's) is
        given: on PostgreSQL dues are database time, and a worker whose clock runs ahead must not
        wake early and spin. ``limits``: of these limits only (a worker's expiry pass applies those
        its config declares: a slot of a limit it does not know must not wake it again and again)."""
        names = None if limits is None else sorted(limits)
        if names == []:
            return None
        with self.db.single_read() as conn:
            if names is None:
                due = self.db.run(conn, "next_due", {}).fetchone()[0]
            else:
                due = self.db.run_in(conn, "next_due_of", {"names": names}).fetchone()[0]
            if due is None:
                return None
            if now is None:
                return int(due)
            return int(due) + now - self.db.now(conn, now)

    @reads
    def states(self, slot_ids: Iterable[str]) -> dict[str, str]:
        """The state of each known slot, in one query (a worker polling its waiters)."""
        ids = list(slot_ids)
        if not ids:
            return {}
        with self.db.single_read() as conn:
            return dict(self.db.run_in(conn, "slot_states", {"ids": ids}).fetchall())

    @reads
    def get(self, slot_id: str) -> SlotRow | None:
        """The slot request, or ``None``."""
        with self.db.single_read() as conn:
            return self._read_slot(conn, slot_id)

    # -- operators' changes ------------------------------------------------------------------------

    def declare(self, configs: Iterable[LimitConfig], now: int) -> None:
        """Record each limit's declared capacity, max hold and per_key (a worker's config, at its
        start), so that an engine without the project lists them (``store.limits.states``); a limit whose
        per_key changed has its keys counted again (see :meth:`_count_keys`)."""
        with self.db.write() as conn:
            for config in sorted(configs, key=lambda c: c.name):  # locks in name order, as everywhere
                self.lock_limit(conn, config, now)
                params = {"name": config.name, "capacity": config.capacity, "max_hold_ms": config.max_hold_ms}
                self.db.run(conn, "limit_declare", params)

    @bulk
    def set_override(self, config: LimitConfig, field: str, value: int | None, now: int) -> list[SlotRow]:
        """Set (or with None reset) an override; a capacity raise hands slots out at once, in
        transactions of at most ``GRANT_BATCH`` grants each: a raise to 100,000 with as many
        waiting holds the limit's lock (and SQLite's write lock) a batch at a time, and the limit's
        other operations go on in between."""
        with self.db.write() as conn:
            now = self.db.now(conn, now)
            self.view(conn, config, now)
            self.db.run(
                conn,
                "set_capacity" if field == "capacity" else "set_max_hold",
                {"name": config.name, "value": value, "now": now},
            )
            decision = self._grant_batch(conn, config, now)
        self.tell(decision.events)
        granted = list(decision.granted)
        while decision.granted and decision.view.free > 0 and decision.view.waiting > 0:  # more of both
            with self.db.write() as conn:
                decision = self._grant_batch(conn, config, self.db.now(conn, now))
            self.tell(decision.events)
            granted += decision.granted
        return granted

    def set_key_override(self, config: LimitConfig, key: str, value: int | None, now: int) -> list[SlotRow]:
        """Set (or with None reset) the capacity of one key of keyed limit ``config``, under the
        limit's lock; a raise hands that key's waiters their slots at once (what the limit can give)."""
        with self.db.write() as conn:
            now = self.db.now(conn, now)
            self.view(conn, config, now)
            params = {"name": config.name, "key": key, "value": value, "now": now}
            self.db.run(conn, "key_override_reset" if value is None else "key_override_set", params)
            self._reopen_key(conn, config, key, now)
            decision = self._grant_batch(conn, config, now)
        self.tell(decision.events)
        return list(decision.granted)

    def _grant_batch(self, conn: Connection, config: LimitConfig, now: int) -> Decision:
        """One transaction's share of a grant pass: up to ``GRANT_BATCH`` grants, written."""
        decision = Decision(self.view(conn, config, now))
        self.grant_heads(conn, decision, now, most=GRANT_BATCH)
        self.write_decision(conn, decision, now)
        self.db.notify(conn, {"kind": "limits"})
        return decision
