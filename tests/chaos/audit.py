"""The audit after the chaos: read the store (a connection of its own, ``database.py``) and the steps'
effect logs, check every promise, and put the figures in a report.

Steps: a step whose completion duro recorded is never executed again — a replay returns the
recorded result (docs/durability.md), and a worker that may have lost a run executes none of its code
until the store confirms it still owns it (docs/durability.md, "Ownership is fenced on execution").
So no execution of a step body may *begin* after that step's completion was recorded, by any worker,
stopped or not: the step's ``ended_at`` (the recording worker's wall clock, the clock the effects
are stamped with, same host) against each effect's start. Executions beyond the first that began
before the completion was recorded are allowed — a step whose body ran but whose result never
committed: its worker was killed, or lost the run (stopped, or cut off by an outage, past its
lease) — and counted by cause.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from tests.chaos.database import Database
    from tests.chaos.driver import Starter, Timeline
    from tests.chaos.plan import Plan
    from tests.chaos.sampler import Worst
    from tests.chaos.workers import Life

TERMINAL = ("completed", "failed", "cancelled")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Report:
    figures: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append(Check(name, ok, detail))

    def text(self) -> str:
        lines = ["", "=" * 100, "duro chaos report", "=" * 100, *self.figures, "", "checks:"]
        for check in self.checks:
            lines.append(f"  [{'ok' if check.ok else 'FAIL'}] {check.name}: {check.detail}")
        lines.append("=" * 100)
        return "\n".join(lines)

    def failures(self) -> str:
        return "\n".join(f"{c.name}: {c.detail}" for c in self.checks if not c.ok)


class StepRow(NamedTuple):
    run_id: str
    seq: int
    kind: str
    name: str
    status: str
    result: str | None
    detail: str | None
    ended_at: int | None


class Effect(NamedTuple):
    """One execution of a step body: where and when it began."""

    run_id: str
    step: str
    pid: int
    at: int  # wall ms


def read_effects(directory: Path) -> list[Effect]:
    """Every execution of a step body, from the effect logs."""
    effects = []
    for path in sorted(directory.glob("effects-*.log")):
        for line in path.read_text().splitlines():
            run_id, step, pid, at = line.split("\t")
            effects.append(Effect(run_id, step, int(pid), int(at)))
    return effects


def audit(
    db: Database,
    effects_dir: Path,
    *,
    plan: Plan,
    lives: list[Life],
    worst: Worst,
    capacities: dict[str, int],
    quota_limits: dict[str, int],
    starter: Starter,
    timeline: Timeline,
    findings: list[str],
    startup_failures: list[str],
    waits: dict[str, float],
    seconds: float,
) -> Report:
    report = Report()
    try:
        runs = db.rows("SELECT id, workflow, status, parent_id, output, error FROM duro_runs")
        steps = [
            StepRow(*row)
            for row in db.rows(
                "SELECT run_id, seq, kind, name, status, result, detail, ended_at FROM duro_steps"
            )
        ]
        slots = db.rows(
            "SELECT id, limit_name, run_id, state, pos, enqueued_at, granted_at, held_since, "
            "ended_at, reason FROM duro_slots"
        )
        limit_rows = db.rows("SELECT name, busy, reserved, waiting FROM duro_limits")
        slot_log = db.rows(
            "SELECT seq, tx, slot_id, limit_name, old_state, new_state, pos FROM chaos_slot_log ORDER BY seq"
        )
    finally:
        db.close()
    effects = read_effects(effects_dir)
    f = report.figures

    # -- the run and what was injected -------------------------------------------------------------
    f.append(
        f"plan {plan.name} on {plan.store}: seed {plan.seed}, {plan.runs} top-level runs over "
        f"{plan.window:.0f}s, {len(lives)} worker processes in all ({plan.workers} at a time)"
    )
    f.append(
        f"duration {seconds:.1f}s (chaos and starts {waits.get('chaos', -1):.1f}s, drain "
        f"{waits.get('drain', -1):.1f}s, slots back {waits.get('slots', -1):.1f}s); "
        f"starter {starter.seconds:.1f}s"
    )
    f.append(
        f"injected: {timeline.kills} SIGKILLs, {len(timeline.stops)} SIGSTOPs for "
        f"{plan.stop_for:.0f}s (past the 3s lease), {len(timeline.outages)} outages "
        f"({'; '.join(timeline.outages) or 'none'})"
    )
    f.append("SIGSTOP targets (a worker owning a run in this state):")
    f.extend(f"  {stop}" for stop in timeline.stops)
    report.check(
        "every SIGSTOP hit a worker owning a run in its target state",
        not timeline.missed_targets,
        f"{len(timeline.stops)} stops: {', '.join(s.split(':')[0] for s in timeline.stops)}"
        if not timeline.missed_targets
        else f"no run found in state {timeline.missed_targets}",
    )
    f.append(
        f"client: {len(starter.started)} runs started, {starter.refused} starts refused by a quota, "
        f"{len(starter.cancelled)} runs cancelled, {len(starter.signalled)} signals sent, "
        f"{len(starter.errors)} start/cancel/signal calls failed (retried)"
    )

    # -- every run terminal, none failed ------------------------------------------------------------
    statuses = Counter(status for _, _, status, _, _, _ in runs)
    by_workflow: dict[str, Counter[str]] = defaultdict(Counter)
    for _, workflow, status, _, output, _ in runs:
        outcome = status if status != "completed" else f"completed:{json.loads(output) if output else ''}"
        if workflow == "chaos.parent" and status == "completed":
            outcome = "completed"
        by_workflow[workflow][outcome] += 1
    f.append(
        f"runs: {len(runs)} ({sum(1 for r in runs if r[3] is None)} top-level, "
        f"{sum(1 for r in runs if r[3] is not None)} children); "
        + ", ".join(f"{s} {n}" for s, n in sorted(statuses.items()))
    )
    for workflow, counts in sorted(by_workflow.items()):
        f.append(f"  {workflow}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    unfinished = [r for r in runs if r[2] not in TERMINAL]
    report.check(
        "every run terminal",
        not unfinished,
        f"{len(runs) - len(unfinished)}/{len(runs)} terminal"
        + (f"; unfinished: {[(r[0], r[2]) for r in unfinished[:10]]}" if unfinished else ""),
    )
    failed = [r for r in runs if r[2] == "failed"]
    causes = Counter(_error_type(r[5]) for r in failed)
    report.check(
        "no run failed",
        not failed,
        "none"
        if not failed
        else f"{len(failed)} failed: {dict(causes)}; e.g. {failed[0][0]}: {_error_message(failed[0][5])}",
    )
    missing = sorted(set(starter.started) - {r[0] for r in runs})
    report.check("every started run exists", not missing, f"{len(missing)} missing {missing[:5]}")
    signalled = set(starter.signalled)
    unanswered = [
        r[0]
        for r in runs
        if r[1] == "chaos.ask"
        and r[0] in signalled
        and r[2] == "completed"
        and json.loads(r[4] or "null") != "answered"
    ]
    report.check(
        "every run signalled got its signal",
        not unanswered,
        f"{len(signalled)} signalled"
        if not unanswered
        else f"{len(unanswered)} unanswered: {unanswered[:5]}",
    )

    # -- quotas and limits, as sampled -----------------------------------------------------------------
    f.append(
        f"sampler: {worst.samples} samples, longest gap {worst.longest_gap:.2f}s, "
        f"{worst.failed_reads} failed reads (the store away)"
        + (
            f"; oldest open transaction seen {worst.oldest_transaction:.1f}s ({worst.oldest_transaction_was})"
            if db.dialect == "postgresql"
            else ""
        )
    )
    for prefix, limit in sorted(quota_limits.items()):
        seen = max([v for k, v in worst.quota_max.items() if k.startswith(prefix + ":")] or [0])
        keys = sum(1 for k in worst.quota_max if k.startswith(prefix + ":"))
        f.append(f"quota {prefix}:*: max active per key {seen} (limit {limit}) over {keys} keys")
        report.check(f"quota {prefix}:* never exceeded", seen <= limit, f"max {seen}, limit {limit}")
    for name, capacity in sorted(capacities.items()):
        f.append(
            f"limit {name}: max busy+reserved {worst.held_max.get(name, 0)} slots / "
            f"{worst.counter_max.get(name, 0)} on its row (capacity {capacity}), max waiting "
            f"{worst.waiting_max.get(name, 0)}"
        )
        held = max(worst.held_max.get(name, 0), worst.counter_max.get(name, 0))
        report.check(
            f"limit {name} never over capacity", held <= capacity, f"max {held}, capacity {capacity}"
        )
    report.check(
        "limit rows agree with their slots",
        worst.counter_mismatches == 0,
        f"{worst.counter_mismatches} disagreeing samples" + _examples(worst.examples, "row counts"),
    )
    report.check("enough samples", worst.samples >= 100, f"{worst.samples}")

    # -- every slot accounted for ------------------------------------------------------------------------
    _audit_slots(report, slots, limit_rows, steps)

    # -- FIFO per limit ---------------------------------------------------------------------------------
    report.check(
        "FIFO: no grant ever skipped a waiter (sampled)",
        worst.fifo_violations == 0,
        f"{worst.fifo_violations} samples" + _examples(worst.examples, "queue position"),
    )
    _audit_slot_log(report, slot_log, capacities, transactions=db.slot_log_has_transactions)

    # -- steps executed exactly once -------------------------------------------------------------------
    _audit_steps(report, steps, effects, lives)

    # -- the workers ----------------------------------------------------------------------------------
    killed = [life for life in lives if life.fate == "killed"]
    f.append(
        f"workers: {len(killed)} killed and replaced, "
        f"{len(startup_failures)} exited at start, the database unreachable "
        f"({', '.join(startup_failures) or 'none'}), "
        f"{sum(len(life.stops) for life in lives)} stopped and resumed, "
        f"{sum(1 for life in lives if life.fate in ('died', 'stalled'))} died or stalled on their own"
    )
    report.check(
        "no worker died or stalled on its own",
        not findings,
        "none" if not findings else " || ".join(findings[:6]),
    )
    if timeline.log:
        f.append("timeline:")
        f.extend(f"  {line}" for line in timeline.lines())
    if starter.errors:
        f.append(f"client errors (first of {len(starter.errors)}): {starter.errors[0]}")
    if starter.failure is not None:
        report.check(
            "the starter ran to the end", False, f"{type(starter.failure).__name__}: {starter.failure}"
        )
    return report


def _error_type(text: str | None) -> str:
    try:
        return json.loads(text or "{}").get("type", "?").rsplit(".", 1)[-1]
    except ValueError:
        return "?"


def _error_message(text: str | None) -> str:
    try:
        return json.loads(text or "{}").get("message", "")[:300]
    except ValueError:
        return (text or "")[:300]


def _examples(examples: list[str], marker: str) -> str:
    found = [e for e in examples if marker in e][:3]
    return f"; e.g. {found}" if found else ""


def _audit_slots(
    report: Report, slots: list[tuple[Any, ...]], limit_rows: list[tuple[Any, ...]], steps: list[StepRow]
) -> None:
    active = [s for s in slots if s[3] in ("waiting", "reserved", "busy")]
    ends = Counter(f"{s[1]} {s[3]}" + (f"/{s[9]}" if s[9] else "") for s in slots)
    report.figures.append(
        f"slots: {len(slots)} requests; " + ", ".join(f"{k} {v}" for k, v in sorted(ends.items()))
    )
    report.check(
        "every slot back (none waiting, reserved or busy at the end)",
        not active,
        f"{len(active)} still active" + (f": {[(s[0], s[3]) for s in active[:5]]}" if active else ""),
    )
    counters = [r for r in limit_rows if (r[1], r[2], r[3]) != (0, 0, 0)]
    report.check(
        "limit rows at zero at the end",
        not counters,
        f"{counters}" if counters else "busy/reserved/waiting 0",
    )
    # a slot became busy exactly when its run's hook step was closed (one transaction)
    held = {s[0] for s in slots if s[7] is not None}
    hooks_done = {
        f"{step.run_id}.{step.seq}" for step in steps if step.kind == "hook" and step.status == "completed"
    }
    report.check(
        "every slot held <=> its acquire recorded",
        held == hooks_done,
        f"{len(held)} slots held; held without a recorded acquire {sorted(held - hooks_done)[:5]}, "
        f"recorded without a held slot {sorted(hooks_done - held)[:5]}",
    )
    # a release step says released=True exactly for the slots released by a release
    released_by_step = set()
    for step in steps:
        if step.kind == "release" and json.loads(step.result or "{}").get("released"):
            released_by_step.add(json.loads(step.detail or "{}")["slot_id"])
    released = {s[0] for s in slots if s[3] == "released" and s[9] == "release"}
    report.check(
        "every release recorded <=> its slot released once",
        released == released_by_step,
        f"{len(released)} released by release_slot; without a step "
        f"{sorted(released - released_by_step)[:5]}, "
        f"step without a release {sorted(released_by_step - released)[:5]}",
    )


HELD = ("reserved", "busy")
ENDED = ("released", "timed_out", "cancelled")


def _audit_slot_log(
    report: Report, log: list[tuple[Any, ...]], capacities: dict[str, int], *, transactions: bool
) -> None:
    """Per limit: an ended slot is never written again (a second release, or an expiry applied to a
    slot already released, would be a decision taken on a stale read of the slot); and, where the log
    knows each change's transaction (PostgreSQL), the replay of ``_replay``. SQLite gives a trigger
    no transaction id: there the sampler checks capacity and FIFO on every snapshot instead."""
    by_limit: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for row in log:
        by_limit[row[3]].append(row)
    if not transactions:
        report.figures.append(
            "slot log: no transaction ids on SQLite, so capacity and FIFO are checked "
            "on the sampler's snapshots, not after every transaction"
        )
    for name, rows in sorted(by_limit.items()):
        capacity = capacities.get(name, 0)
        reborn = [
            f"{slot_id} {previous} -> {new} (tx {tx})"
            for _, tx, slot_id, _, previous, new, _ in rows
            if previous in ENDED
        ]
        grants = sum(1 for *_, previous, new, _ in rows if new in HELD and previous in (None, "waiting"))
        if transactions:
            worst, skipped, count = _replay(rows)
            report.figures.append(
                f"slot log {name}: {len(rows)} changes in {count} transactions, "
                f"{grants} grants; max busy+reserved {worst} (capacity {capacity})"
            )
            report.check(
                f"limit {name} within capacity after every transaction (slot log)",
                worst <= capacity,
                f"max {worst}, capacity {capacity}",
            )
            report.check(
                f"FIFO {name}: every grant went to the head of the queue (slot log)",
                not skipped,
                f"{grants} grants in order" if not skipped else f"{len(skipped)} skips: {skipped[:3]}",
            )
        else:
            report.figures.append(f"slot log {name}: {len(rows)} changes, {grants} grants")
        report.check(
            f"no {name} slot written after it ended (never granted or freed twice)",
            not reborn,
            "none" if not reborn else f"{len(reborn)}: {reborn[:3]}",
        )


def _replay(rows: list[tuple[Any, ...]]) -> tuple[int, list[str], int]:
    """Replay one limit's slot changes, transaction by transaction: the most slots held (busy +
    reserved) after any transaction (exactly, not sampled); the grants that skipped a waiter — FIFO
    means a request handed a slot (reserved, or busy at once) is ahead of every request that waited
    before the transaction and still waits after it —; and the number of transactions. The
    documented exceptions need no special case: a waiter that times out or whose run ends leaves the
    queue (it no longer waits), and a lapsed reservation goes back at the end of the queue (a new
    position)."""
    state: dict[str, tuple[str, int]] = {}
    worst, skipped, transactions = 0, [], 0
    i = 0
    while i < len(rows):
        tx = rows[i][1]
        j = i
        while j < len(rows) and rows[j][1] == tx:
            j += 1
        waiting_before = {sid for sid, (st, _) in state.items() if st == "waiting"}
        granted = []
        for _, _, slot_id, _, previous, new, pos in rows[i:j]:
            if new in HELD and previous in (None, "waiting"):
                granted.append((pos, slot_id))
            state[slot_id] = (new, pos)
        still = [state[sid][1] for sid in waiting_before if state[sid][0] == "waiting"]
        for pos, slot_id in granted:
            if still and pos > min(still):
                skipped.append(
                    f"{slot_id} (pos {pos}) handed out while pos {min(still)} kept waiting (tx {tx})"
                )
        worst = max(worst, sum(1 for st, _ in state.values() if st in HELD))
        transactions += 1
        i = j
    return worst, skipped, transactions


def _audit_steps(report: Report, steps: list[StepRow], effects: list[Effect], lives: list[Life]) -> None:
    """Every completed step executed at least once, and no execution began after its completion was
    recorded; the executions beyond the recorded one are counted by cause."""
    executions: dict[tuple[str, str], list[Effect]] = defaultdict(list)
    for effect in sorted(effects, key=lambda e: e.at):
        executions[(effect.run_id, effect.step)].append(effect)
    completed = {(s.run_id, s.name): s for s in steps if s.kind == "step" and s.status == "completed"}
    failed_steps = [(s.run_id, s.name) for s in steps if s.kind == "step" and s.status == "failed"]
    life_of = {life.pid: life for life in lives}
    t0 = min((life.started_ms for life in lives), default=0)
    never_ran = [key for key in completed if key not in executions]
    causes: Counter[str] = Counter()  # executions beyond the recorded one, begun before the record
    late: list[str] = []  # began after the completion was recorded
    late_causes: Counter[str] = Counter()
    late_by_worker: Counter[str] = Counter()
    for key, step in completed.items():
        if step.ended_at is None:  # the rule needs it: a completed step without it is a finding
            late.append(f"{key[0]}/{key[1]} is completed without a completion time (ended_at)")
            continue
        ended_at = step.ended_at
        before = [e for e in executions.get(key, []) if e.at <= ended_at]
        recorded = _recorded_execution(step, before)
        for effect in executions.get(key, []):
            life = life_of.get(effect.pid)
            if effect.at > ended_at:
                late_causes[_state(life, effect.at)] += 1
                late_by_worker[_who(life, effect.pid, t0)] += 1
                recorder = life_of.get(_recording_pid(step) or -1)
                late.append(
                    f"{key[0]}/{key[1]} began {effect.at - ended_at} ms after its completion was "
                    f"recorded (at t+{(ended_at - t0) / 1000:.1f}s by "
                    f"{recorder.id if recorder else '?'}), by {_who(life, effect.pid, t0)}"
                )
            elif effect is not recorded:
                causes[_state(life, effect.at)] += 1
    unrecorded = sum(1 for key in executions if key not in completed)
    report.figures.append(
        f"steps: {len(completed)} completed, {len(effects)} executions; {sum(causes.values())} more that "
        f"began before the completion was recorded ({_counts(causes) or 'none'}); {len(late)} that began "
        f"after it ({_counts(late_causes) or 'none'}); {unrecorded} executed but never recorded (a run "
        f"cancelled or a worker killed in between); {len(failed_steps)} failed"
    )
    if late_by_worker:
        report.figures.append(
            "  began after their completion was recorded, by worker: "
            + "; ".join(f"{who}: {n}" for who, n in late_by_worker.most_common())
        )
    report.check(
        "every completed step executed (at least once)",
        not never_ran,
        f"{len(never_ran)} without an execution {never_ran[:5]}",
    )
    report.check(
        "no step body began after its completion was recorded",
        not late,
        f"{len(late)} executions ({_counts(late_causes)}); e.g. " + " || ".join(late[:5])
        if late
        else f"none; {sum(causes.values())} re-executions, all begun before the completion was recorded",
    )
    report.check("no step failed", not failed_steps, f"{failed_steps[:5]}" if failed_steps else "none")


def _recording_pid(step: StepRow) -> int | None:
    """The pid of the worker whose result was recorded (each step returns ``<name>@<pid>``)."""
    try:
        return int(str(json.loads(step.result or "null")).rsplit("@", 1)[1])
    except (ValueError, IndexError):
        return None


def _recorded_execution(step: StepRow, before: list[Effect]) -> Effect | None:
    """The execution whose result was recorded: the recording worker's last one before the record."""
    pid = _recording_pid(step)
    mine = [e for e in before if e.pid == pid]
    return mine[-1] if mine else (before[-1] if before else None)


def _state(life: Life | None, at: int) -> str:
    """What the executing worker was, for an execution that began at ``at`` and was not recorded."""
    if life is None:
        return "a process that is not a chaos worker"
    if any(stop <= at for stop, _ in life.stops):
        return "a stopped worker after SIGCONT"
    if life.stops:
        return "a worker stopped before recording"
    if life.fate is not None:
        return f"a worker {life.fate} before recording"
    return "a live worker that lost the run (its lease lapsed)"


def _who(life: Life | None, pid: int, t0: int) -> str:
    if life is None:
        return f"pid {pid} (not a chaos worker)"
    stops = ", ".join(
        f"stopped t+{(stop - t0) / 1000:.1f}s-t+{(cont - t0) / 1000:.1f}s" for stop, cont in life.stops
    )
    return f"{life.id} (pid {pid}{', ' + stops if stops else ''}{', ' + life.fate if life.fate else ''})"


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items()))
