"""Leases, decided without I/O: until when this worker may execute its runs, and which other
workers are dead.

A worker's heartbeat is the lease on every run it owns. Two rules keep a run's code running in one
place at a time, whatever the clocks of the machines say (each is measured on one process's
monotonic clock, never compared across machines):

- **Our own lease** (:class:`OwnLease`): good until the instant the last heartbeat that went
  through was *sent*, plus the lease. Past it, the worker executes no code of any run until a
  heartbeat goes through again (which proves nobody took its runs: see below).
- **Others' deaths** (:class:`Watch`): another worker's lease has expired when its heartbeat stamp stayed
  the same for a whole lease, counted from the end of the heartbeat of ours that read it, while our
  own heartbeats kept going through on time. Its last heartbeat was sent before we read it, so its
  own lease had run out by then. Counting only while ours went through means a store that nobody
  could write (SQLite locked by another process, PostgreSQL down) expires nobody's lease: when it comes
  back, everyone beats again before anyone may judge.

An expired worker's row is deleted in the claim that takes its runs, on the stamp we saw (a
heartbeat that slipped in first keeps it alive). Its next heartbeat then fails, and it drops every
run it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class OwnLease:
    """Until when this worker may execute its runs without asking the store (monotonic ms)."""

    lease_ms: int
    good_until: int | None = None

    def renewed(self, sent_at: int) -> None:
        """A heartbeat sent at ``sent_at`` went through."""
        until = sent_at + self.lease_ms
        if self.good_until is None or until > self.good_until:
            self.good_until = until

    def valid(self, now: int) -> bool:
        return self.good_until is not None and now < self.good_until

    def lapse(self) -> None:
        """Our row was gone: whatever we held is not ours until we have joined again."""
        self.good_until = None


@dataclass
class Watch:
    """The heartbeats of the other workers of our namespace, as our own heartbeats read them."""

    lease_ms: int
    beat_every_ms: int
    # worker id -> (its stamp, our monotonic ms from which it counts as unchanged)
    seen: dict[str, tuple[int, int]] = field(default_factory=dict)
    last_beat: int | None = None  # when our last heartbeat that went through ended

    def on_time(self, sent_at: int, done_at: int) -> bool:
        """Whether our heartbeat went through on time: it took at most a beat interval, and came at
        most half a lease after the previous one ended (later, the store was out of reach, or this
        process was frozen: either way the others may not have been able to beat either)."""
        return (
            self.last_beat is not None
            and done_at - sent_at <= self.beat_every_ms
            and done_at - self.last_beat <= self.lease_ms // 2
        )

    def beat(self, sent_at: int, done_at: int, stamps: dict[str, int], me: str) -> None:
        """Our heartbeat sent at ``sent_at`` went through at ``done_at`` and read ``stamps``."""
        fair = self.on_time(sent_at, done_at)
        seen: dict[str, tuple[int, int]] = {}
        for worker, stamp in stamps.items():
            if worker == me:
                continue
            before = self.seen.get(worker)
            seen[worker] = before if fair and before is not None and before[0] == stamp else (stamp, done_at)
        self.seen = seen
        self.last_beat = done_at

    def missed(self) -> None:
        """Our heartbeat failed: judge nobody on what we saw before."""
        self.last_beat = None

    def expired(self, now: int) -> list[tuple[str, int]]:
        """(worker id, the stamp we saw) of every worker silent for a whole lease of fair time."""
        if self.last_beat is None or now - self.last_beat > self.lease_ms // 2:
            return []  # our own heartbeats are late: we cannot tell a dead worker from a dead store
        return sorted(
            (worker, stamp) for worker, (stamp, since) in self.seen.items() if now - since >= self.lease_ms
        )

    def forget(self, worker: str) -> None:
        self.seen.pop(worker, None)
