"""The rate rule (``duro.rules._rates``), pure: at most ``limit`` in costs granted in any window of
``per_ms``, each queue's head granted at the earliest instant the window (and a pause) allows, FIFO.
A hypothesis run drives random arrivals through the rule at the instants it names and checks every
grant against a brute-force reference: the window property over every window, the queue order, and
that no grant could have been made a millisecond earlier."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from duro.rules._rates import Grant, RateView, Waiter, earliest, grant_due, in_window, window_use

RATE = RateView("partner-api", limit=3, per_ms=60_000)


def waiters(*costs: int) -> list[Waiter]:
    return [Waiter(f"w{n}", n, cost) for n, cost in enumerate(costs, start=1)]


def test_seven_starts_on_three_a_minute_go_three_three_and_one():
    grants: list[Grant] = []
    queue = waiters(*[1] * 7)
    instants = []
    now = 0
    while queue:
        decision = grant_due(RATE, grants, queue, now)
        for waiter, at in decision.granted:
            instants.append((waiter.id, at))
            grants.append(Grant(at, waiter.cost))
        queue = queue[len(decision.granted) :]
        if queue:
            assert decision.next_due is not None and decision.next_due > now
            now = decision.next_due
    assert instants == [
        ("w1", 0),
        ("w2", 0),
        ("w3", 0),
        ("w4", 60_000),
        ("w5", 60_000),
        ("w6", 60_000),
        ("w7", 120_000),
    ]


def test_a_grant_leaves_the_window_exactly_per_ms_after_it_was_made():
    grants = [Grant(1_000, 3)]
    assert earliest(RATE, grants, 1, 1_000) == 61_000
    assert in_window(grants, RATE.per_ms, 60_999) == grants
    assert in_window(grants, RATE.per_ms, 61_000) == []
    assert window_use(grants, RATE.per_ms, 30_000) == 3


def test_a_large_cost_waits_for_room_and_a_small_one_behind_it_never_passes():
    grants = [Grant(0, 2)]
    decision = grant_due(RATE, grants, waiters(3, 1), 10_000)  # 3 needs the whole window
    assert decision.granted == [] and decision.next_due == 60_000  # the 1 behind it waits too


def test_oldest_grants_leave_first_and_the_window_is_exact_with_costs():
    grants = [Grant(0, 1), Grant(10_000, 1), Grant(20_000, 1)]
    assert earliest(RATE, grants, 1, 30_000) == 60_000  # the grant at 0 leaves
    assert earliest(RATE, grants, 2, 30_000) == 70_000  # and the one at 10 s
    assert earliest(RATE, grants, 3, 30_000) == 80_000


def test_a_pause_holds_every_grant_until_it_ends():
    paused = RATE._replace(paused_until=45_000)
    decision = grant_due(paused, [], waiters(1, 1), 5_000)
    assert decision.granted == [] and decision.next_due == 45_000
    decision = grant_due(paused, [], waiters(1, 1), 45_000)
    assert [(w.id, at) for w, at in decision.granted] == [("w1", 45_000), ("w2", 45_000)]


def test_a_cost_above_the_limit_in_effect_never_fits():
    lowered = RATE._replace(limit=1)
    assert earliest(lowered, [], 2, 0) is None
    decision = grant_due(lowered, [], waiters(2, 1), 0)
    assert decision == ([], None)  # the head waits for the limit to be raised; nobody passes it


# -- the rule against a brute-force reference ------------------------------------------------------

PER = 20  # a short window, so that the reference can try every millisecond


def _fits(grants: list[Grant], limit: int, cost: int, at: int) -> bool:
    return sum(g.cost for g in grants if at - PER < g.at <= at) + cost <= limit


@settings(max_examples=300, deadline=None)
@given(
    limit=st.integers(min_value=1, max_value=5),
    arrivals=st.lists(
        st.tuples(st.integers(min_value=0, max_value=30), st.integers(min_value=1, max_value=5)),
        min_size=1,
        max_size=25,
    ),
    pause=st.one_of(st.none(), st.tuples(st.integers(0, 40), st.integers(1, 30))),
)
def test_the_rule_grants_each_waiter_at_the_earliest_instant_the_window_allows(limit, arrivals, pause):
    """Waiters arrive at increasing instants (gaps from ``arrivals``), costs capped at ``limit``; the
    rule is run at every arrival and at every instant it names. Each grant is checked against the
    reference: FIFO, never a millisecond later than the window (and the pause) allows, and every
    window of ``PER`` holds at most ``limit``."""
    view = RateView("r", limit=limit, per_ms=PER)
    paused_from, paused_for = pause if pause is not None else (None, 0)
    now, queue, grants, arrived = 0, [], [], {}
    for n, (gap, _) in enumerate(arrivals):
        arrived[f"w{n}"] = now = now + gap
    pending = sorted(arrived.items(), key=lambda item: item[1])
    order: list[str] = []
    clock, due = 0, None
    costs = {f"w{n}": min(cost, limit) for n, (_, cost) in enumerate(arrivals)}
    while pending or queue:
        candidates = [t for t in (pending[0][1] if pending else None, due) if t is not None]
        clock = max(clock, min(candidates))
        while pending and pending[0][1] <= clock:
            waiter_id, _ = pending.pop(0)
            queue.append(Waiter(waiter_id, len(order) + len(queue), costs[waiter_id]))
        paused_until = paused_from + paused_for if paused_from is not None and paused_from <= clock else None
        decision = grant_due(view._replace(paused_until=paused_until), grants, queue, clock)
        for waiter, at in decision.granted:
            assert at == clock
            # the reference: no earlier instant since it could have been granted would have done
            lower = max([arrived[waiter.id], *(g.at for g in grants[-1:])])
            for earlier in range(lower, at):
                paused = paused_from is not None and paused_from <= earlier < paused_from + paused_for
                assert paused or not _fits(grants, limit, waiter.cost, earlier), (waiter, earlier, grants)
            grants.append(Grant(at, waiter.cost))
            order.append(waiter.id)
        queue = queue[len(decision.granted) :]
        due = decision.next_due
        assert due is None or due > clock or not queue
    assert order == sorted(arrived, key=lambda w: (arrived[w], int(w[1:])))  # FIFO
    for first in grants:  # every window [first.at, first.at + PER) holds at most the limit
        assert sum(g.cost for g in grants if first.at <= g.at < first.at + PER) <= limit


@settings(max_examples=300, deadline=None)
@given(
    limit=st.integers(min_value=1, max_value=8),
    gaps=st.lists(st.tuples(st.integers(0, 15), st.integers(1, 8)), min_size=0, max_size=20),
    cost=st.integers(1, 8),
    later=st.integers(0, 30),
    pause=st.one_of(st.none(), st.integers(0, 60)),
)
def test_the_oldest_grants_room_needed_names_are_all_due_reads(limit, gaps, cost, later, pause):
    """The store reads the window's use and only its oldest ``room_needed`` grants (each costs at
    least 1): ``due`` answers from them what it answers from the whole window."""
    from duro.rules._rates import due, room_needed

    view = RateView("r", limit=limit, per_ms=PER, paused_until=pause)
    grants, at = [], 0
    for gap, grant_cost in gaps:  # a history the rule could have made: each grant fits when made
        at += gap
        if sum(g.cost for g in in_window(grants, PER, at)) + min(grant_cost, limit) <= limit:
            grants.append(Grant(at, min(grant_cost, limit)))
    now = at + later
    window = in_window(grants, PER, now)
    used = sum(g.cost for g in window)
    cost = min(cost, limit)
    whole = due(view, used, window, cost, now)
    assert due(view, used, window[: room_needed(view, used, cost)], cost, now) == whole
    start = now if pause is None else max(now, pause)
    assert whole is not None and whole >= start and _fits(grants, limit, cost, whole)
    assert not any(_fits(grants, limit, cost, t) for t in range(start, whole))  # none earlier
