"""A limit's recent figures, the pure part: nearest-rank percentiles and what each slot row counts as."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from duro.store._limits import SlotStats, percentile, summarize

SINCE = 1_000_000


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        ([], 50, None),
        ([7], 50, 7),
        ([7], 99, 7),
        ([1, 2, 3, 4], 50, 2),  # rank ceil(0.5 * 4) = 2
        ([1, 2, 3, 4, 5], 50, 3),
        ([1, 2, 3, 4, 5], 90, 5),  # rank ceil(4.5) = 5
        (list(range(1, 11)), 90, 9),
        (list(range(1, 11)), 99, 10),
        (list(range(1, 101)), 99, 99),
        (list(range(1, 101)), 100, 100),
        (list(range(1, 101)), 1, 1),
        ([0, 0, 0, 5_000], 50, 0),
        ([0, 0, 0, 5_000], 90, 5_000),
    ],
)
def test_nearest_rank_percentiles(values, p, expected):
    assert percentile(values, p) == expected


@pytest.mark.parametrize("p", [0, -1, 100.5])
def test_a_percentile_outside_0_to_100_is_refused(p):
    with pytest.raises(ValueError, match="not in"):
        percentile([1, 2], p)


@given(st.lists(st.integers(0, 10**9), min_size=1, max_size=200), st.sampled_from([50, 90, 99]))
def test_a_percentile_is_a_value_with_at_least_p_percent_at_or_below_it(values, p):
    ordered = sorted(values)
    found = percentile(ordered, p)
    assert found in ordered
    at_or_below = sum(v <= found for v in ordered)
    assert at_or_below >= math.ceil(p / 100 * len(ordered))
    # and it is the smallest such value: fewer than p % lie strictly below it
    assert sum(v < found for v in ordered) < math.ceil(p / 100 * len(ordered))


def row(enqueued, held=None, state="busy", reason=None, ended=None):
    return (enqueued, held, state, reason, ended)


def test_no_rows_give_no_waits_and_zero_counts():
    assert summarize([], SINCE) == SlotStats(0, None, None, None, 0, 0)


def test_what_each_slot_counts_as():
    rows = [
        row(SINCE, SINCE),  # granted at once, still busy: a wait of 0
        row(SINCE, SINCE + 4_000, "released", "release", SINCE + 9_000),  # waited 4 s, released
        row(SINCE, SINCE + 2_000, "released", "max_hold", SINCE + 60_000),  # waited 2 s, then expired
        row(SINCE - 90_000, SINCE - 80_000, "released", "max_hold", SINCE + 1),  # held before: expiry only
        row(SINCE - 90_000, SINCE - 80_000, "released", "operator", SINCE + 5),  # counts nothing
        row(SINCE, None, "timed_out", None, SINCE + 30_000),  # a timeout
        row(SINCE - 9_000, None, "timed_out", None, SINCE - 1),  # before the window: nothing
        row(SINCE, None, "cancelled", "run_ended", SINCE + 3),  # left the queue: nothing
        row(SINCE, None, "waiting"),  # still waiting: nothing yet
    ]
    assert summarize(rows, SINCE) == SlotStats(
        granted=3, wait_p50_ms=2_000, wait_p90_ms=4_000, wait_p99_ms=4_000, expired=2, timed_out=1
    )


def test_the_window_begins_at_since_inclusive():
    rows = [
        row(SINCE - 5_000, SINCE),  # held exactly at since: in
        row(SINCE - 5_000, SINCE - 1),  # a millisecond before: out
        row(SINCE - 9_000, None, "timed_out", None, SINCE),
    ]
    assert summarize(rows, SINCE) == SlotStats(1, 5_000, 5_000, 5_000, 0, 1)


def test_percentiles_of_many_waits():
    rows = [row(SINCE, SINCE + wait, "released", "release", SINCE + wait + 1) for wait in range(1, 1001)]
    assert summarize(reversed(rows), SINCE)[:4] == (1000, 500, 900, 990)


def test_a_wait_is_never_negative():
    """A clock that stepped back between enqueue and grant (several machines) counts as no wait."""
    assert summarize([row(SINCE + 10, SINCE + 5)], SINCE).wait_p50_ms == 0
