"""The lease decisions (duro.rules._lease): until when a worker may execute its runs, and when it may
judge another worker dead. Pure: every instant is passed in."""

from __future__ import annotations

from duro.rules._lease import OwnLease, Watch

LEASE = 3000
EVERY = LEASE // 3


def test_our_lease_runs_from_when_the_last_good_heartbeat_was_sent():
    lease = OwnLease(LEASE)
    assert not lease.valid(0)  # never confirmed
    lease.renewed(sent_at=1000)
    assert lease.valid(1000) and lease.valid(3999) and not lease.valid(4000)
    lease.renewed(sent_at=500)  # a slow beat sent earlier cannot shorten it
    assert lease.good_until == 4000
    lease.lapse()
    assert not lease.valid(1000)


def beats(
    watch: Watch, start: int, end: int, stamps, me: str = "me", every: int = EVERY, took: int = 10
) -> int:
    """Our heartbeats every ``every`` ms from ``start`` to ``end``, each reading ``stamps(t)``."""
    t = start
    while t <= end:
        watch.beat(t, t + took, stamps(t), me)
        t += every
    return t - every + took


def test_a_worker_silent_for_a_whole_lease_of_fair_time_expires_on_the_stamp_seen():
    watch = Watch(LEASE, EVERY)
    last = beats(watch, 0, 2000, lambda t: {"me": t, "other": 7})
    assert watch.expired(last) == []  # seen unchanged since the first beat ended (10): not a lease yet
    last = beats(watch, 3000, 4000, lambda t: {"me": t, "other": 7})
    assert watch.expired(last) == [("other", 7)]


def test_a_worker_that_beats_never_expires():
    watch = Watch(LEASE, EVERY)
    last = beats(watch, 0, 30_000, lambda t: {"me": t, "other": t // 2000})  # a new stamp every 2 s
    assert watch.expired(last) == []


def test_no_lease_expires_for_a_time_when_nobody_could_write():
    """The store locked or down: our own heartbeats are late too, so what we saw before says nothing;
    counting starts again when ours go through on time."""
    watch = Watch(LEASE, EVERY)
    beats(watch, 0, 2000, lambda t: {"me": t, "other": 7})
    watch.beat(2000, 12_000, {"me": 12_000, "other": 7}, "me")  # one beat blocked 10 s behind a lock
    assert watch.expired(12_000) == []
    last = beats(watch, 13_000, 14_000, lambda t: {"me": t, "other": 7})
    assert watch.expired(last) == []  # two fair seconds since the store came back
    last = beats(watch, 15_000, 16_000, lambda t: {"me": t, "other": 7})
    assert watch.expired(last) == [("other", 7)]


def test_a_missed_heartbeat_or_a_gap_resets_what_we_saw():
    watch = Watch(LEASE, EVERY)
    beats(watch, 0, 2000, lambda t: {"me": t, "other": 7})
    watch.missed()
    assert watch.expired(10_000) == []
    watch.beat(10_000, 10_010, {"me": 1, "other": 7}, "me")  # first beat after a miss: counts from here
    assert watch.seen["other"] == (7, 10_010)
    watch.beat(15_000, 15_010, {"me": 2, "other": 7}, "me")  # we were frozen for 5 s: a gap, again
    assert watch.seen["other"] == (7, 15_010)
    assert watch.expired(15_010) == []


def test_our_own_late_heartbeats_expire_nobody():
    watch = Watch(LEASE, EVERY)
    last = beats(watch, 0, 4000, lambda t: {"me": t, "other": 7})
    assert watch.expired(last) == [("other", 7)]
    assert watch.expired(last + LEASE) == []  # no heartbeat of ours for a lease: we cannot judge


def test_workers_that_left_are_forgotten():
    watch = Watch(LEASE, EVERY)
    beats(watch, 0, 4000, lambda t: {"me": t, "other": 7} if t < 3000 else {"me": t})
    assert "other" not in watch.seen and watch.expired(4010) == []
    beats(watch, 5000, 9000, lambda t: {"me": t, "other": 7})
    watch.forget("other")
    assert watch.expired(9010) == []
