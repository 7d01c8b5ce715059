"""The independent sampler: its own connection (``database.py``: psycopg, or a read-only ``sqlite3``
connection that never holds a lock), reading the store's tables in a loop while the chaos goes on,
and keeping the worst of what it saw.

Each check is one SQL statement, so it reads one consistent snapshot (PostgreSQL, READ COMMITTED;
SQLite, a WAL read transaction of its own):

- quotas: per ``concurrency_key``, the runs in the counted statuses (every unfinished one);
- limits: per limit, the slot rows ``busy`` and ``reserved`` (and the counts on the limit's row,
  which must match the rows), and FIFO: every slot handed out (reserved or busy) has a queue
  position ``pos`` below every waiting one — a grant never skips a waiter;
- workers: the age of each worker's heartbeat (on PostgreSQL's clock; on SQLite, this host's);
- the oldest open transaction (a worker stopped inside one holds its locks: a figure, not a check;
  PostgreSQL only, SQLite has no view of its connections).

While the server restarts the sampler reconnects; the gaps are counted and reported.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from tests.chaos.database import Database, Error, wall_ms

QUOTAS = (
    "SELECT concurrency_key, count(*) FROM duro_runs WHERE concurrency_key IS NOT NULL "
    "AND status IN ('pending', 'running', 'suspended', 'blocked') GROUP BY concurrency_key"
)
LIMITS = """
SELECT l.name, l.busy, l.reserved, l.waiting,
       count(s.id) FILTER (WHERE s.state = 'busy'),
       count(s.id) FILTER (WHERE s.state = 'reserved'),
       count(s.id) FILTER (WHERE s.state = 'waiting'),
       max(s.pos) FILTER (WHERE s.state IN ('busy', 'reserved')),
       min(s.pos) FILTER (WHERE s.state = 'waiting')
FROM duro_limits l
LEFT JOIN duro_slots s ON s.limit_name = l.name AND s.state IN ('waiting', 'reserved', 'busy')
GROUP BY l.name, l.busy, l.reserved, l.waiting
"""
OLDEST_TRANSACTION = (
    "SELECT extract(epoch FROM clock_timestamp() - xact_start), state, wait_event_type, "
    "left(query, 160) FROM pg_stat_activity WHERE datname = current_database() "
    "AND pid <> pg_backend_pid() AND xact_start IS NOT NULL AND state <> 'idle' "
    "ORDER BY xact_start LIMIT 1"
)
HEARTBEATS = {
    "postgresql": "SELECT id, pid, (extract(epoch FROM clock_timestamp()) * 1000)::bigint - heartbeat_at "
    "FROM duro_workers",
    "sqlite": "SELECT id, pid, {now} - heartbeat_at FROM duro_workers",
}


@dataclass
class Worst:
    """What the sampler saw: maxima, and every violation (kept, with a few examples)."""

    samples: int = 0
    quota_max: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # key -> max active
    held_max: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # busy+reserved slots
    counter_max: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # the same, on its row
    waiting_max: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    counter_mismatches: int = 0
    fifo_violations: int = 0
    examples: list[str] = field(default_factory=list)
    failed_reads: int = 0
    longest_gap: float = 0.0  # seconds without a successful sample (the server restarting)
    oldest_transaction: float = 0.0  # seconds
    oldest_transaction_was: str = ""

    def note(self, text: str) -> None:
        if len(self.examples) < 20:
            self.examples.append(text)


class Sampler(threading.Thread):
    def __init__(self, url: str, interval: float = 0.02) -> None:
        super().__init__(daemon=True, name="chaos-sampler")
        self.db = Database.for_url(url)
        self.interval = interval
        self.stop = threading.Event()
        self.worst = Worst()
        self.heartbeat_age: dict[str, tuple[int, int]] = {}  # worker id -> (pid, ms since its heartbeat)
        self.lock = threading.Lock()

    def run(self) -> None:
        last_ok = time.perf_counter()
        while not self.stop.is_set():
            try:
                self._sample()
                now = time.perf_counter()
                self.worst.longest_gap = max(self.worst.longest_gap, now - last_ok)
                last_ok = now
            except Error:
                self.worst.failed_reads += 1
            self.stop.wait(self.interval)
        self.db.close()

    def _sample(self) -> None:
        worst, db = self.worst, self.db
        for key, active in db.rows(QUOTAS):
            worst.quota_max[key] = max(worst.quota_max[key], active)
        for name, *counts, top_granted, first_waiting in db.rows(LIMITS):
            on_row, in_slots = tuple(counts[:3]), tuple(counts[3:])  # (busy, reserved, waiting) twice
            worst.held_max[name] = max(worst.held_max[name], in_slots[0] + in_slots[1])
            worst.counter_max[name] = max(worst.counter_max[name], on_row[0] + on_row[1])
            worst.waiting_max[name] = max(worst.waiting_max[name], in_slots[2])
            if on_row != in_slots:
                worst.counter_mismatches += 1
                worst.note(
                    f"{name}: row counts busy/reserved/waiting {'/'.join(map(str, on_row))} "
                    f"but slots {'/'.join(map(str, in_slots))}"
                )
            if top_granted is not None and first_waiting is not None and top_granted > first_waiting:
                worst.fifo_violations += 1
                worst.note(
                    f"{name}: a slot at queue position {top_granted} is handed out while position "
                    f"{first_waiting} still waits"
                )
        if db.dialect == "postgresql":
            for seconds, state, waits_on, query in db.rows(OLDEST_TRANSACTION):
                if float(seconds) > worst.oldest_transaction:
                    worst.oldest_transaction = float(seconds)
                    worst.oldest_transaction_was = f"{state}, waiting on {waits_on or 'nothing'}: {query}"
        heartbeats = HEARTBEATS[db.dialect].format(now=wall_ms())
        ages = {worker_id: (pid, age) for worker_id, pid, age in db.rows(heartbeats)}
        with self.lock:
            self.heartbeat_age = ages
        worst.samples += 1

    def ages(self) -> dict[str, tuple[int, int]]:
        with self.lock:
            return dict(self.heartbeat_age)
