"""The operators' side of limits: their rows, their slots, and overrides (a capacity raise hands
the freed slots out, a bounded batch a transaction)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.engine import Connection

from .._config import LimitConfig
from .._slots import Decision, SlotRow
from ._rows import LimitState, slot_row
from ._slots import HAND_OUT_BATCH, SlotRows

SLOT_LISTING_ORDER = ("busy", "reserved", "waiting")  # a limit's slots as listed: held first, then the queue


class LimitRows(SlotRows):
    """A limit's row and its slots as operators see and change them."""

    def limit_states(self) -> dict[str, LimitState]:
        """Each limit's row: overrides and counts, by name."""
        with self.db.single_read() as conn:
            return {r[0]: LimitState(*r) for r in self.db.run(conn, "limit_rows", {})}

    def declare_limits(self, configs: Iterable[LimitConfig], now: int) -> None:
        """Record each limit's declared capacity, max hold and per_key (a worker's config, at its
        start), so that an engine without the project lists them (``limit_states``); a limit whose
        per_key changed has its keys counted again (see ``_keys``)."""
        with self.db.write() as conn:
            for config in sorted(configs, key=lambda c: c.name):  # locks in name order, as everywhere
                self._lock_limit(conn, config, now)
                params = {"name": config.name, "capacity": config.capacity, "max_hold_ms": config.max_hold_ms}
                self.db.run(conn, "limit_declare", params)

    def limit_slots(self, name: str, max_rows: int = 10_000) -> list[SlotRow]:
        """The limit's active slots: busy and reserved first, then the queue in order."""
        with self.db.single_read() as conn:
            return [slot_row(r) for r in self.db.run(conn, "limit_slots", {"name": name, "n": max_rows})]

    def limit_slots_page(
        self, name: str, key: str | None, after: tuple[int, int, str] | None, n: int
    ) -> list[tuple[int, SlotRow]]:
        """Up to ``n`` of the limit's active slots (``key``: of that key) in the order of
        :meth:`limit_slots`, after ``after`` (a state's rank, its pos and id: the last slot of the
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

    def set_limit_override(
        self, config: LimitConfig, field: str, value: int | None, now: int
    ) -> list[SlotRow]:
        """Set (or with None reset) an override; a capacity raise hands slots out at once, in
        transactions of at most ``HAND_OUT_BATCH`` grants each: a raise to 100,000 with as many
        waiting holds the limit's lock (and SQLite's write lock) a batch at a time, and the limit's
        other operations go on in between."""
        with self.db.write() as conn:
            now = self.db.now(conn, now)
            self._view(conn, config, now)
            self.db.run(
                conn,
                "set_capacity" if field == "capacity" else "set_max_hold",
                {"name": config.name, "value": value, "now": now},
            )
            decision = self._hand_out_batch(conn, config, now)
        self._tell_slots(decision.events)
        granted = list(decision.granted)
        while decision.granted and decision.view.free > 0 and decision.view.waiting > 0:  # more of both
            with self.db.write() as conn:
                decision = self._hand_out_batch(conn, config, self.db.now(conn, now))
            self._tell_slots(decision.events)
            granted += decision.granted
        return granted

    def set_key_override(self, config: LimitConfig, key: str, value: int | None, now: int) -> list[SlotRow]:
        """Set (or with None reset) the capacity of one key of keyed limit ``config``, under the
        limit's lock; a raise hands that key's waiters their slots at once (what the limit can give)."""
        with self.db.write() as conn:
            now = self.db.now(conn, now)
            self._view(conn, config, now)
            params = {"name": config.name, "key": key, "value": value, "now": now}
            self.db.run(conn, "key_override_reset" if value is None else "key_override_set", params)
            self._reopen_key(conn, config, key, now)
            decision = self._hand_out_batch(conn, config, now)
        self._tell_slots(decision.events)
        return list(decision.granted)

    def _hand_out_batch(self, conn: Connection, config: LimitConfig, now: int) -> Decision:
        """One transaction's share of a hand-out: up to ``HAND_OUT_BATCH`` grants, written."""
        decision = Decision(self._view(conn, config, now))
        self._hand_out(conn, decision, now, most=HAND_OUT_BATCH)
        self._write_decision(conn, decision, now)
        self.db.notify(conn, ["limits"])
        return decision
