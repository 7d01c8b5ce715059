"""The pure rules of which waiting runs a worker keeps in memory (duro.rules._eviction)."""

from __future__ import annotations

import dataclasses

import pytest

from duro import DuroError, WorkerOptions
from duro.rules._eviction import IdleWait, evict_at_once, idle_too_long, next_idle_deadline, over_capacity

NOW = 1_000_000


def idle(run_id: str, since: int = 0, kind: str = "signal", due_at: int | None = None) -> IdleWait:
    return IdleWait(run_id, since, kind, due_at)


@pytest.mark.parametrize(
    ("kind", "due_at", "evict_after", "expected"),
    [
        ("sleep", NOW + 5_001, 5_000, True),  # a timer further away than the grace: at once
        ("sleep", NOW + 5_000, 5_000, False),  # within it: it stays and wakes in memory
        ("sleep", NOW + 10**9, None, False),  # no grace (the harness): only the bound evicts
        ("signal", NOW + 10**9, 5_000, False),  # an event may come any moment: the grace applies
        ("slot", None, 0, False),
        ("child", None, 5_000, False),
        ("sleep", NOW + 1, 0, True),  # "0s": every timer goes at once
    ],
)
def test_a_timer_further_than_evict_after_goes_at_once(kind, due_at, evict_after, expected):
    assert evict_at_once(idle("r", NOW, kind, due_at), NOW, evict_after) is expected


def test_an_event_wait_goes_after_evict_after_of_idleness():
    waiting = idle("r", since=100)
    assert not idle_too_long(waiting, 100 + 4_999, 5_000)
    assert idle_too_long(waiting, 100 + 5_000, 5_000)
    assert not idle_too_long(waiting, 10**12, None)


def test_over_the_bound_the_longest_idle_go_first_and_executing_runs_stay():
    oldest_first = [idle("a", 1), idle("b", 2), idle("c", 3)]
    assert over_capacity(oldest_first, resident=5, max_resident=3) == ["a", "b"]
    assert over_capacity(oldest_first, resident=3, max_resident=3) == []
    assert over_capacity(oldest_first, resident=10, max_resident=0) == ["a", "b", "c"]  # only idle ones
    assert over_capacity([], resident=10, max_resident=1) == []


def test_the_idle_deadline_is_the_oldest_idle_runs():
    assert next_idle_deadline([idle("a", 7), idle("b", 9)], 100) == 107
    assert next_idle_deadline([], 100) is None
    assert next_idle_deadline([idle("a", 7)], None) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_resident_runs", -1),
        ("max_resident_runs", True),
        ("max_concurrent_runs", 0),
        ("max_concurrent_runs", 1.5),
        ("evict_after", "soon"),
    ],
)
def test_worker_options_refuse_bad_bounds_naming_the_field(field, value):
    with pytest.raises(DuroError, match=field):
        WorkerOptions(**{field: value})


def test_worker_options_defaults():
    options = WorkerOptions()
    assert (options.max_resident_runs, options.max_concurrent_runs, options.evict_after_ms) == (
        10_000,
        250,
        5_000,
    )
    assert WorkerOptions(evict_after=None, max_resident_runs=0).evict_after_ms is None


def test_the_former_evict_after_is_evict_after_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="evict_after"):
        options = WorkerOptions(unload_after="2s", max_resident_runs=3)
    assert (options.evict_after_ms, options.max_resident_runs) == (2_000, 3)
    assert dataclasses.replace(options, evict_after=None).evict_after_ms is None  # replace keeps no old name
    with pytest.warns(DeprecationWarning), pytest.raises(DuroError, match="unload_after|evict_after"):
        WorkerOptions(unload_after="soon")
