"""How much chaos, on which store, and when: the plans and the schedule drawn from a seed."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

# What a targeted SIGSTOP looks for: a worker owning a run in this state (see Driver._find_owner).
STOP_STATES = ("sleep", "signal", "queue")


@dataclass(frozen=True)
class Plan:
    """Runs started over ``window`` seconds on ``store`` by ``workers`` worker processes, while a
    random worker is killed every ``kill_gap`` seconds; one worker is stopped (SIGSTOP) for
    ``stop_for`` seconds, past the 3 s lease, per entry of ``stop_states`` — each time a worker that
    owns a run in that state (sleeping, waiting on a signal, waiting in a limit's queue) —; and one
    outage happens per entry of ``outages``: (``fast`` or ``immediate``, seconds down) restarts the
    PostgreSQL server, (``lock``, seconds) holds SQLite's write lock from another connection."""

    name: str
    store: str  # "postgresql" or "sqlite"
    runs: int
    window: float
    workers: int
    outages: tuple[tuple[str, float], ...]
    stop_states: tuple[str, ...] = STOP_STATES
    stop_for: float = 7.0
    kill_gap: tuple[float, float] = (4.0, 8.0)
    cancel_share: float = 0.02
    tenants: int = 16
    drain: float = 150.0
    seed: int = 0


# The default (CI) plans take about two minutes each. PostgreSQL: one short restart, and one that
# keeps the server down twice the lease; SQLite: the write lock held twice the lease, twice.
PLANS = {
    ("postgresql", False): Plan(
        "default", "postgresql", runs=1000, window=70.0, workers=4, outages=(("fast", 0.5), ("fast", 6.5))
    ),
    ("sqlite", False): Plan(
        "default", "sqlite", runs=700, window=80.0, workers=3, outages=(("lock", 6.0), ("lock", 6.0))
    ),
    ("postgresql", True): Plan(
        "long",
        "postgresql",
        runs=10_000,
        window=720.0,
        workers=4,
        stop_states=STOP_STATES * 3,
        stop_for=8.0,
        drain=300.0,
        outages=(
            ("fast", 0.5),
            ("immediate", 0.5),
            ("fast", 0.0),
            ("immediate", 0.0),
            ("fast", 6.0),
            ("immediate", 8.0),
        ),
    ),
    ("sqlite", True): Plan(
        "long",
        "sqlite",
        runs=5_000,
        window=720.0,
        workers=3,
        stop_states=STOP_STATES * 3,
        stop_for=8.0,
        drain=300.0,
        outages=(("lock", 6.0),) * 6 + (("lock", 10.0),) * 2,
    ),
}


def plan_from_env(store: str) -> Plan:
    """The plan for ``store``: long with ``DURO_CHAOS_LONG=1``; ``DURO_CHAOS_SEED`` replays a seed's
    random choices; ``DURO_CHAOS_RUNS`` and ``DURO_CHAOS_WINDOW`` make it shorter (or longer)."""
    plan = PLANS[(store, os.environ.get("DURO_CHAOS_LONG") == "1")]
    seed = int(os.environ.get("DURO_CHAOS_SEED") or random.SystemRandom().randrange(1, 1_000_000))
    runs = int(os.environ.get("DURO_CHAOS_RUNS") or plan.runs)
    window = float(os.environ.get("DURO_CHAOS_WINDOW") or plan.window)
    return Plan(**{**plan.__dict__, "seed": seed, "runs": runs, "window": window})


@dataclass(frozen=True)
class Event:
    """One chaos action ``at`` seconds from the start: ``kill``, ``stop`` (``arg``: the state its
    victim's run must be in; ``due``: when it was first due, as it waits for such a run), ``cont``
    (``arg``: the worker's slot), or ``outage`` (``arg``: its index in the plan's outages)."""

    at: float
    kind: str
    arg: str | int | None = None
    due: float | None = None


def schedule(plan: Plan, rng: random.Random) -> list[Event]:
    """Kills at random gaps; the stops and outages spread evenly over the window, in a random order
    (each stop's SIGCONT is scheduled when it happens)."""
    events: list[Event] = []
    at = rng.uniform(*plan.kill_gap)
    while at < plan.window:
        events.append(Event(at, "kill"))
        at += rng.uniform(*plan.kill_gap)
    specials = [Event(0, "stop", state) for state in plan.stop_states]
    specials += [Event(0, "outage", index) for index in range(len(plan.outages))]
    rng.shuffle(specials)
    span = plan.window / (len(specials) + 1)
    for i, special in enumerate(specials):
        events.append(Event(span * (i + 1) + rng.uniform(-0.2, 0.2) * span, special.kind, special.arg))
    return sorted(events, key=lambda event: event.at)
