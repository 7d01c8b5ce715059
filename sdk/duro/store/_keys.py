"""A keyed limit's keys as the store keeps them (``duro_limit_keys``, see ``_tables.LimitKeyRow``).

Each key has a row while it has a busy, reserved or waiting slot (or an operator's capacity): its
counts, and while it has room its oldest waiter's position (``open_pos``). A key left with nothing
keeps its row a while (its next slot updates it in place: no row and index entries written and
erased at every pair), until the expiry pass prunes idle keys, once a minute at most. So a hand-out reads the
keys that can take a slot, oldest waiter first, and only those keys' first waiters: 100,000 waiters
behind 10,000 full keys cost what 100 do. A request reads its own key's row, never counts slots.

Every slot decision of a keyed limit writes its keys' changes in its own transaction, under the
limit's lock (see ``_slots``), so the rows never disagree with the slots. When a limit's ``per_key``
changes (``duro.config.py`` on a reload, a worker started with another config), its keys are counted
again from its slots by the first transaction that locks it with the new value. Two workers that
disagree on ``per_key`` (a rolling deploy) count them again at each other's turn: correct, slower,
until one config is left.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Connection

from .._config import LimitConfig
from .._slots import Decision, KeyView, LimitView, SlotRow
from ._connection import Connector
from ._queries import COUNT_KEYS
from ._records import reads
from ._rows import slot_row

KEYLESS = ""  # the key row of a keyed limit's slots without a key (queued before it was keyed)
PRUNE_MS = 60_000  # idle keys' rows are pruned this often at the most (see Keys.prune)

# a key as operators list it: (key, capacity in effect, overridden, busy, reserved, waiting)
KeyListing = tuple[str, int, bool, int, int, int]


def _key_view(per_key: int, row: Sequence[Any] | None) -> KeyView:
    """A key's row (``_KEY_COUNTS`` after the key: override, busy, reserved, waiting) as a decision
    reads it; no row is a key with nothing active and no override."""
    if row is None:
        return KeyView(per_key)
    override, busy, reserved, waiting = row
    return KeyView(override or per_key, int(busy), int(reserved), int(waiting))


def _listed(per_key: int, row: Sequence[Any]) -> KeyListing:
    key, override, busy, reserved, waiting = row
    return (key, override or per_key, override is not None, int(busy), int(reserved), int(waiting))


class Keys:
    """A keyed limit's key rows: read by decisions, written with them, listed for operators."""

    def __init__(self, db: Connector) -> None:
        self.db = db
        self._pruned_at: int | None = None  # when this store last pruned idle keys (see prune)

    # -- decisions -------------------------------------------------------------------------------

    def views(self, conn: Connection, view: LimitView, keys: Iterable[str]) -> dict[str, KeyView]:
        """The stored counts of ``keys`` of keyed limit ``view``, each with its capacity in effect."""
        assert view.per_key is not None
        wanted = sorted(set(keys))
        found = self.db.run_in(conn, "key_rows", {"name": view.name, "keys": wanted}).fetchall()
        rows = {row[0]: row[1:] for row in found}
        return {key: _key_view(view.per_key, rows.get(key)) for key in wanted}

    def send_read(self, conn: Connection, config: LimitConfig, key: str) -> Callable[[], KeyView]:
        """Send the read of one key's row (in a pipeline: its answer can wait); the call returned
        gives it, once it is in."""
        assert config.per_key is not None
        per_key = config.per_key
        cursor = self.db.run(conn, "key_row", {"name": config.name, "key": key})

        def stored() -> KeyView:
            row = cursor.fetchone()
            return _key_view(per_key, None if row is None else row[1:])

        return stored

    def heads(
        self, conn: Connection, decision: Decision, changed: Mapping[str, SlotRow], wanted: int
    ) -> list[SlotRow]:
        """The waiters a hand-out of ``wanted`` slots of a keyed limit may go to, in queue order,
        their keys' counts made known to the decision. Rows this decision changed are read from it.

        The keys that can take a slot are the stored keys with room (oldest waiter first) and the
        keys this decision changed, as they stand now. The oldest ``wanted`` waiters that can be
        granted are among the first ``wanted`` such keys, each giving at most its room: a key past
        them has its oldest waiter behind ``wanted`` grantable waiters already. So the hand-out
        reads ``wanted`` (+ the changed) key rows and as many short queues, one round trip."""
        view = decision.view
        assert view.per_key is not None
        touched = decision.key_changes()
        found = self.db.run(conn, "open_keys", {"name": view.name, "n": wanted + len(touched)}).fetchall()
        stored = {row[0]: _key_view(view.per_key, row[1:]) for row in found}
        unknown = [k for k in touched if k is not None and k not in stored and k not in decision.keys]
        if unknown:
            stored.update(self.views(conn, view, unknown))
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

    def write(self, conn: Connection, decision: Decision, now: int) -> None:
        """The decision's changes to its keys' counts, after its slots (a key's oldest waiter is
        read from them). A key left with nothing keeps its row until :meth:`prune`."""
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

    def prune(self, configs: Iterable[LimitConfig], now: int) -> None:
        """Drop the rows of keys with nothing busy, reserved or waiting and no override, of keyed
        limits ``configs``; at most once per ``PRUNE_MS`` (the expiry pass calls it every time). No
        limit's lock: a decision that changes a key at the same moment either finds its row gone
        and makes it again from its own change, or has changed it first, and then it is not idle."""
        keyed = sorted(config.name for config in configs if config.per_key is not None)
        last = self._pruned_at
        if not keyed or (last is not None and 0 <= now - last < PRUNE_MS):
            return
        with self.db.write() as conn:
            for name in keyed:
                self.db.run(conn, "keys_prune", {"name": name})
        self._pruned_at = now

    def reopen(self, conn: Connection, config: LimitConfig, key: str, now: int) -> None:
        """A key's capacity changed: whether it has room (its ``open_pos``) judged again."""
        assert config.per_key is not None
        params = {"name": config.name, "key": key, "per_key": config.per_key, "now": now}
        self.db.run(conn, "key_change", {**params, "busy": 0, "reserved": 0, "waiting": 0})
        self.db.run(conn, "key_drop", params)

    def count(self, conn: Connection, config: LimitConfig, now: int) -> None:
        """A limit's keys counted again from its slots, for its ``per_key`` now (cleared when it is
        no longer keyed; operators' capacities are kept), under the limit's lock."""
        params = {"name": config.name, "per_key": config.per_key, "now": now}
        for query in COUNT_KEYS if config.per_key is not None else COUNT_KEYS[:2]:
            self.db.run(conn, query, params)
        self.db.run(conn, "limit_per_key", params)

    # -- operators -------------------------------------------------------------------------------

    @reads
    def of(self, config: LimitConfig, most: int = 50, search: str | None = None) -> list[KeyListing]:
        """Keyed limit ``config``'s keys with anything busy, reserved or waiting, and every key with
        an override, busiest first (busy + reserved, then waiting), at most ``most``; ``search``:
        those whose key contains it."""
        assert config.per_key is not None
        params: dict[str, Any] = {"name": config.name, "n": max(0, int(most))}
        if search:
            params["search"] = search
        with self.db.single_read() as conn:
            found = self.db.run(conn, "keys_page_search" if search else "keys_page", params).fetchall()
        return [_listed(config.per_key, row) for row in found]

    @reads
    def get(self, config: LimitConfig, key: str) -> KeyListing:
        """One key of keyed limit ``config`` as :meth:`of` lists it (all 0 if it has no row)."""
        assert config.per_key is not None
        with self.db.single_read() as conn:
            found = self.db.run(conn, "key_row", {"name": config.name, "key": key}).fetchone()
        return _listed(config.per_key, found) if found is not None else (key, config.per_key, False, 0, 0, 0)

    @reads
    def tally(self, config: LimitConfig) -> tuple[int, int]:
        """How many keys of keyed limit ``config`` have anything busy, reserved or waiting, and how
        many of them are at their capacity (the metrics' gauges: never the keys themselves)."""
        assert config.per_key is not None
        with self.db.single_read() as conn:
            active, full = self.db.run(
                conn, "keys_tally", {"name": config.name, "per_key": config.per_key}
            ).fetchone()
        return int(active), int(full)
