"""The operators' view of limits: their rows, their slots, a keyed limit's keys, and a limit's recent
figures (what operators change, the overrides, are slot transactions: see ``_slots``).

A limit's recent figures (waits, grants, lost releases, timeouts) and the queues runs wait in are two
reads of ``duro_slots`` for the faces (Studio's limit page and runs list, the API): the SQL, and
the pure summary of what it returns (:func:`summarize`, nearest-rank percentiles), tested apart.

A *wait* is ``held_since - enqueued_at`` of a slot that became held in the window (what the
``duro_slot_wait_seconds`` histogram observes, see ``duro.rules._slots``): a slot granted at once waited
0 ms; one whose reservation lapsed keeps its first ``enqueued_at``, so its wait counts the lapse.
An *expiry* is a slot ``max_hold`` took back (``state = 'released'``, ``reason = 'max_hold'``): a
release that got lost. A *timeout* is a request whose ``timeout`` passed in the queue
(``state = 'timed_out'``). Each counts when it happened (``held_since``, ``ended_at``) in the window.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from ..definitions._config import LimitConfig
from ..rules._slots import SlotRow
from ._connection import Connector, LimitState, slot_row
from ._records import reads

# a key as operators list it: (key, capacity in effect, overridden, busy, reserved, waiting)
KeyListing = tuple[str, int, bool, int, int, int]


def _listed(per_key: int, row: Sequence[Any]) -> KeyListing:
    key, override, busy, reserved, waiting = row
    return (key, override or per_key, override is not None, int(busy), int(reserved), int(waiting))


SLOT_LISTING_ORDER = ("busy", "reserved", "waiting")  # a limit's slots as listed: held first, then the queue


# Query plans. Slot rows are kept once ended, so a limit's history only grows:
# - busy slots held since the window began: a range of ``duro_slots_queue (limit_name, state, pos)``
#   at ``(name, 'busy')``, at most the capacity's rows;
# - slots that ended in the window (released: waits and expiries of slots held and then released;
#   timed out): a range of ``duro_slots_ended (limit_name, ended_at) WHERE ended_at IS NOT NULL``
#   (schema 6), proportional to the window's ends, not to the limit's whole history. Cancelled
#   slots (a waiting run that ended) are filtered out.
# UNION ALL rather than OR: each branch is one index range on both databases.
LIMIT_STATS = (
    "SELECT enqueued_at, held_since, state, reason, ended_at FROM duro_slots "
    "WHERE limit_name = :name AND state = 'busy' AND held_since >= :since "
    "UNION ALL "
    "SELECT enqueued_at, held_since, state, reason, ended_at FROM duro_slots "
    "WHERE limit_name = :name AND state IN ('released', 'timed_out') AND ended_at >= :since"
)

# The queue (if any) each run waits in: the partial index ``duro_slots_run (run_id) WHERE state IN
# ('waiting', 'reserved')``, whose condition this repeats term for term (SQLite uses a partial index
# only for a query whose WHERE names its condition); one probe per run id of the page.
QUEUED_LIMITS = (
    "SELECT run_id, limit_name FROM duro_slots WHERE run_id IN (:ids) "
    "AND state IN ('waiting', 'reserved') ORDER BY enqueued_at"
)

PERCENTILES = (50, 90, 99)

# (enqueued_at, held_since, state, reason, ended_at): a slot row as LIMIT_STATS reads it
StatsRow = tuple[int, int | None, str, str | None, int | None]


class SlotStats(NamedTuple):
    """A limit's figures since an instant: slots that became held (``granted``) and the percentiles
    of their waits in milliseconds (``None`` when none did), expiries and timeouts."""

    granted: int
    wait_p50_ms: int | None
    wait_p90_ms: int | None
    wait_p99_ms: int | None
    expired: int
    timed_out: int


def percentile(ordered: Sequence[int], p: float) -> int | None:
    """The nearest-rank ``p``-th percentile (0 < p <= 100) of ``ordered`` (sorted ascending): the
    smallest value that at least ``p`` % of the values are at or below; ``None`` for no values."""
    if not 0 < p <= 100:
        raise ValueError(f"percentile {p!r} is not in (0, 100]")
    if not ordered:
        return None
    rank = math.ceil(p / 100 * len(ordered))
    return ordered[max(rank, 1) - 1]


def summarize(rows: Iterable[StatsRow], since: int) -> SlotStats:
    """The figures of ``rows`` (slot rows, any of them) for the window that began at ``since``."""
    waits: list[int] = []
    expired = timed_out = 0
    for enqueued_at, held_since, state, reason, ended_at in rows:
        if held_since is not None and held_since >= since:
            waits.append(max(0, held_since - enqueued_at))
        if ended_at is not None and ended_at >= since:
            if state == "released" and reason == "max_hold":
                expired += 1
            elif state == "timed_out":
                timed_out += 1
    waits.sort()
    p50, p90, p99 = (percentile(waits, p) for p in PERCENTILES)
    return SlotStats(len(waits), p50, p90, p99, expired, timed_out)


class Limits:
    """A limit's row and its slots as operators see and change them, and its figures."""

    def __init__(self, db: Connector) -> None:
        self.db = db

    @reads
    def states(self) -> dict[str, LimitState]:
        """Each limit's row: overrides and counts, by name."""
        with self.db.single_read() as conn:
            return {r[0]: LimitState(*r) for r in self.db.run(conn, "limit_rows", {})}

    @reads
    def slots(self, name: str, max_rows: int = 10_000) -> list[SlotRow]:
        """The limit's active slots: busy and reserved first, then the queue in order."""
        with self.db.single_read() as conn:
            return [slot_row(r) for r in self.db.run(conn, "limit_slots", {"name": name, "n": max_rows})]

    @reads
    def slots_page(
        self, name: str, key: str | None, after: tuple[int, int, str] | None, n: int
    ) -> list[tuple[int, SlotRow]]:
        """Up to ``n`` of the limit's active slots (``key``: of that key) in the order of
        :meth:`slots`, after ``after`` (a state's rank, its pos and id: the last slot of the
        page before), each with its state's rank; read a state at a time, in index order."""
        rank, pos, slot_id = after if after is not None else (0, -1, "")
        found: list[tuple[int, SlotRow]] = []
        query = "limit_slots_after" if key is None else "limit_key_slots_after"
        with self.db.read() as conn:
            for state_rank, state in enumerate(SLOT_LISTING_ORDER):
                if state_rank < rank:
                    continue
                params = {"name": name, "state": state, "key": key, "n": n - len(found)}
                params |= {"pos": pos, "id": slot_id} if state_rank == rank else {"pos": -1, "id": ""}
                found += [(state_rank, slot_row(r)) for r in self.db.run(conn, query, params)]
                if len(found) >= n:
                    break
        return found

    @reads
    def stats(self, name: str, since_ms: int) -> SlotStats:
        """The limit's figures since ``since_ms``, in one query: slots that became held and their
        waits' p50/p90/p99, expiries (taken back by ``max_hold``) and timeouts."""
        with self.db.single_read() as conn:
            rows = self.db.run_text(conn, LIMIT_STATS, {"name": name, "since": since_ms}).fetchall()
        return summarize(rows, since_ms)

    @reads
    def queued(self, run_ids: Iterable[str]) -> dict[str, str]:
        """The limit whose queue each of these runs waits in (a slot ``waiting`` or ``reserved`` for
        it), in one query; runs that wait in none are left out."""
        ids = list(dict.fromkeys(run_ids))
        if not ids:
            return {}
        with self.db.single_read() as conn:
            return dict(self.db.run_text(conn, QUEUED_LIMITS, {"ids": ids}).fetchall())

    @reads
    def keys(self, config: LimitConfig, most: int = 50, search: str | None = None) -> list[KeyListing]:
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
    def key(self, config: LimitConfig, key: str) -> KeyListing:
        """One key of keyed limit ``config`` as :meth:`keys` lists it (all 0 if it has no row)."""
        assert config.per_key is not None
        with self.db.single_read() as conn:
            found = self.db.run(conn, "key_row", {"name": config.name, "key": key}).fetchone()
        return _listed(config.per_key, found) if found is not None else (key, config.per_key, False, 0, 0, 0)

    @reads
    def key_tally(self, config: LimitConfig) -> tuple[int, int]:
        """How many keys of keyed limit ``config`` have anything busy, reserved or waiting, and how
        many of them are at their capacity (the metrics' gauges: never the keys themselves)."""
        assert config.per_key is not None
        with self.db.single_read() as conn:
            active, full = self.db.run(
                conn, "keys_tally", {"name": config.name, "per_key": config.per_key}
            ).fetchone()
        return int(active), int(full)
