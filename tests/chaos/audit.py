"""The audit after the chaos: read the store (its own connection) and the steps' effect logs, check
every promise, and put the figures in a report.

What "executed exactly once" means here (docs/durability.md): a step whose completion duro recorded
is never executed again — a replay returns the recorded result. A step body may run more than once
only when the worker that ran it could not record it: it died (SIGKILL) between executing and
recording, or it lost the run (stopped past its lease; another worker took the run over, and the
stale worker's late write was refused by the ownership fence). So: every completed step executed at
least once, and executions beyond the first come only from workers that were killed or stopped.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    from tests.chaos.driver import Life, Plan, Starter, Timeline
    from tests.chaos.sampler import Worst

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


def _rows(conn: psycopg.Connection, sql: str) -> list[tuple[Any, ...]]:
    return conn.execute(sql).fetchall()


def read_effects(directory: Path) -> list[tuple[str, str, int, int]]:
    """(run id, step name, pid, wall ms) for every execution of a step body."""
    effects = []
    for path in sorted(directory.glob("effects-*.log")):
        for line in path.read_text().splitlines():
            run_id, step, pid, at = line.split("\t")
            effects.append((run_id, step, int(pid), int(at)))
    return effects


def audit(dsn: str, effects_dir: Path, *, plan: Plan, lives: list[Life], worst: Worst,
          capacities: dict[str, int], quota_limits: dict[str, int], starter: Starter, timeline: Timeline,
          findings: list[str], startup_failures: list[str], waits: dict[str, float], seconds: float) -> Report:
    report = Report()
    with psycopg.connect(dsn, autocommit=True) as conn:
        runs = _rows(conn, "SELECT id, workflow, status, parent_id, output, error FROM duro_runs")
        steps = _rows(conn, "SELECT run_id, seq, kind, name, status, result, detail FROM duro_steps")
        slots = _rows(conn, "SELECT id, limit_name, run_id, state, pos, enqueued_at, granted_at, held_since, "
                            "ended_at, reason FROM duro_slots")
        limit_rows = _rows(conn, "SELECT name, busy, reserved, waiting FROM duro_limits")
        slot_log = _rows(conn, "SELECT seq, tx, slot_id, limit_name, old_state, new_state, pos "
                               "FROM chaos_slot_log ORDER BY seq")
    effects = read_effects(effects_dir)
    f = report.figures

    # -- the run and what was injected -------------------------------------------------------------
    f.append(f"plan {plan.name}: seed {plan.seed}, {plan.runs} top-level runs over {plan.window:.0f}s, "
             f"{len(lives)} worker processes in all (4 at a time)")
    f.append(f"duration {seconds:.1f}s (chaos and starts {waits.get('chaos', -1):.1f}s, drain "
             f"{waits.get('drain', -1):.1f}s, slots back {waits.get('slots', -1):.1f}s); "
             f"starter {starter.seconds:.1f}s")
    f.append(f"injected: {timeline.kills} SIGKILLs, {timeline.stops} SIGSTOPs past the lease, "
             f"{len(timeline.pg_restarts)} PostgreSQL restarts ({', '.join(timeline.pg_restarts) or 'none'})")
    f.append(f"client: {len(starter.started)} runs started, {starter.refused} starts refused by a quota, "
             f"{len(starter.cancelled)} runs cancelled, {len(starter.errors)} start/cancel calls failed "
             f"(retried)")

    # -- every run terminal, none failed ------------------------------------------------------------
    statuses = Counter(status for _, _, status, _, _, _ in runs)
    by_workflow: dict[str, Counter[str]] = defaultdict(Counter)
    for _, workflow, status, _, output, _ in runs:
        outcome = status if status != "completed" else f"completed:{json.loads(output) if output else ''}"
        if workflow == "chaos.parent" and status == "completed":
            outcome = "completed"
        by_workflow[workflow][outcome] += 1
    f.append(f"runs: {len(runs)} ({sum(1 for r in runs if r[3] is None)} top-level, "
             f"{sum(1 for r in runs if r[3] is not None)} children); "
             + ", ".join(f"{s} {n}" for s, n in sorted(statuses.items())))
    for workflow, counts in sorted(by_workflow.items()):
        f.append(f"  {workflow}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    unfinished = [r for r in runs if r[2] not in TERMINAL]
    report.check("every run terminal", not unfinished,
                 f"{len(runs) - len(unfinished)}/{len(runs)} terminal"
                 + (f"; unfinished: {[(r[0], r[2]) for r in unfinished[:10]]}" if unfinished else ""))
    failed = [r for r in runs if r[2] == "failed"]
    causes = Counter(_error_type(r[5]) for r in failed)
    report.check("no run failed", not failed,
                 "none" if not failed else f"{len(failed)} failed: {dict(causes)}; e.g. "
                 f"{failed[0][0]}: {_error_message(failed[0][5])}")
    missing = sorted(set(starter.started) - {r[0] for r in runs})
    report.check("every started run exists", not missing, f"{len(missing)} missing {missing[:5]}")

    # -- quotas and limits, as sampled -----------------------------------------------------------------
    f.append(f"sampler: {worst.samples} samples, longest gap {worst.longest_gap:.2f}s, "
             f"{worst.failed_reads} failed reads (the server restarting); oldest open transaction seen "
             f"{worst.oldest_transaction:.1f}s ({worst.oldest_transaction_was})")
    for prefix, limit in sorted(quota_limits.items()):
        seen = max([v for k, v in worst.quota_max.items() if k.startswith(prefix + ":")] or [0])
        keys = sum(1 for k in worst.quota_max if k.startswith(prefix + ":"))
        f.append(f"quota {prefix}:*: max active per key {seen} (limit {limit}) over {keys} keys")
        report.check(f"quota {prefix}:* never exceeded", seen <= limit, f"max {seen}, limit {limit}")
    for name, capacity in sorted(capacities.items()):
        f.append(f"limit {name}: max busy+reserved {worst.held_max.get(name, 0)} slots / "
                 f"{worst.counter_max.get(name, 0)} on its row (capacity {capacity}), max waiting "
                 f"{worst.waiting_max.get(name, 0)}")
        held = max(worst.held_max.get(name, 0), worst.counter_max.get(name, 0))
        report.check(f"limit {name} never over capacity", held <= capacity,
                     f"max {held}, capacity {capacity}")
    report.check("limit rows agree with their slots", worst.counter_mismatches == 0,
                 f"{worst.counter_mismatches} disagreeing samples" + _examples(worst.examples, "row counts"))
    report.check("enough samples", worst.samples >= 100, f"{worst.samples}")

    # -- every slot accounted for ------------------------------------------------------------------------
    _audit_slots(report, slots, limit_rows, steps)

    # -- FIFO per limit ---------------------------------------------------------------------------------
    report.check("FIFO: no grant ever skipped a waiter (sampled)", worst.fifo_violations == 0,
                 f"{worst.fifo_violations} samples" + _examples(worst.examples, "queue position"))
    _audit_slot_log(report, slot_log, capacities)

    # -- steps executed exactly once -------------------------------------------------------------------
    _audit_steps(report, steps, effects, lives)

    # -- the workers ----------------------------------------------------------------------------------
    killed = [life for life in lives if life.fate == "killed"]
    f.append(f"workers: {len(killed)} killed and replaced, "
             f"{len(startup_failures)} exited at start, the database unreachable "
             f"({', '.join(startup_failures) or 'none'}), "
             f"{sum(len(life.stops) for life in lives)} stopped and resumed, "
             f"{sum(1 for life in lives if life.fate in ('died', 'stalled'))} died or stalled on their own")
    report.check("no worker died or stalled on its own", not findings,
                 "none" if not findings else " || ".join(findings[:6]))
    if timeline.log:
        f.append("timeline:")
        f.extend(f"  {line}" for line in timeline.log)
    if starter.errors:
        f.append(f"client errors (first of {len(starter.errors)}): {starter.errors[0]}")
    if starter.failure is not None:
        report.check("the starter ran to the end", False,
                     f"{type(starter.failure).__name__}: {starter.failure}")
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


def _audit_slots(report: Report, slots: list[tuple[Any, ...]], limit_rows: list[tuple[Any, ...]],
                 steps: list[tuple[Any, ...]]) -> None:
    active = [s for s in slots if s[3] in ("waiting", "reserved", "busy")]
    ends = Counter(f"{s[1]} {s[3]}" + (f"/{s[9]}" if s[9] else "") for s in slots)
    report.figures.append(f"slots: {len(slots)} requests; "
                          + ", ".join(f"{k} {v}" for k, v in sorted(ends.items())))
    report.check("every slot back (none waiting, reserved or busy at the end)", not active,
                 f"{len(active)} still active"
                 + (f": {[(s[0], s[3]) for s in active[:5]]}" if active else ""))
    counters = [r for r in limit_rows if (r[1], r[2], r[3]) != (0, 0, 0)]
    report.check("limit rows at zero at the end", not counters,
                 f"{counters}" if counters else "busy/reserved/waiting 0")
    # a slot became busy exactly when its run's hook step was closed (one transaction)
    held = {s[0] for s in slots if s[7] is not None}
    hooks_done = {f"{run_id}.{seq}" for run_id, seq, kind, _, status, _, _ in steps
                  if kind == "hook" and status == "completed"}
    report.check("every slot held <=> its acquire recorded", held == hooks_done,
                 f"{len(held)} slots held; held without a recorded acquire {sorted(held - hooks_done)[:5]}, "
                 f"recorded without a held slot {sorted(hooks_done - held)[:5]}")
    # a release step says released=True exactly for the slots released by a release
    released_by_step = set()
    for _, _, kind, _, _, result, detail in steps:
        if kind == "release" and json.loads(result or "{}").get("released"):
            released_by_step.add(json.loads(detail)["slot_id"])
    released = {s[0] for s in slots if s[3] == "released" and s[9] == "release"}
    report.check("every release recorded <=> its slot released once", released == released_by_step,
                 f"{len(released)} released by release_slot; without a step "
                 f"{sorted(released - released_by_step)[:5]}, "
                 f"step without a release {sorted(released_by_step - released)[:5]}")


# Installed by the driver once duro's schema exists: every change of a slot's state or queue position,
# and any write at all to a slot that had ended, in the order the changes were made. Each slot
# transaction locks its limit's row before it writes a slot, so within a limit this order is the
# order of duro's decisions (no clocks involved).
SLOT_LOG = """
CREATE TABLE chaos_slot_log (seq bigserial PRIMARY KEY, tx bigint NOT NULL, slot_id text NOT NULL,
                             limit_name text NOT NULL, old_state text, new_state text NOT NULL,
                             pos bigint NOT NULL);
CREATE FUNCTION chaos_log_slot() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR OLD.state IS DISTINCT FROM NEW.state OR OLD.pos IS DISTINCT FROM NEW.pos
            OR OLD.state IN ('released', 'timed_out', 'cancelled') THEN
        INSERT INTO chaos_slot_log (tx, slot_id, limit_name, old_state, new_state, pos)
        VALUES (txid_current(), NEW.id, NEW.limit_name, CASE WHEN TG_OP = 'UPDATE' THEN OLD.state END,
                NEW.state, NEW.pos);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER chaos_log_slot AFTER INSERT OR UPDATE ON duro_slots
    FOR EACH ROW EXECUTE FUNCTION chaos_log_slot();
"""
HELD = ("reserved", "busy")


def _audit_slot_log(report: Report, log: list[tuple[Any, ...]], capacities: dict[str, int]) -> None:
    """Replay every slot change, transaction by transaction, per limit: after each one busy + reserved
    is within capacity (exactly, not sampled); nothing leaves a terminal state (a slot is never
    granted twice); and FIFO — a request handed a slot (reserved, or busy at once) is ahead of every
    request that waited before the transaction and still waits after it. An ended slot is never
    written again (a second release, or an expiry applied to a slot already released, would be a
    decision taken on a stale read of the slot). The documented exceptions
    need no special case: a waiter that times out or whose run ends leaves the queue (it no longer
    waits), and a lapsed reservation goes back at the end of the queue (a new position)."""
    by_limit: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for row in log:
        by_limit[row[3]].append(row)
    for name, rows in sorted(by_limit.items()):
        capacity = capacities.get(name, 0)
        state: dict[str, tuple[str, int]] = {}
        worst, skipped, reborn, grants, transactions = 0, [], [], 0, 0
        i = 0
        while i < len(rows):
            tx = rows[i][1]
            j = i
            while j < len(rows) and rows[j][1] == tx:
                j += 1
            waiting_before = {sid for sid, (st, _) in state.items() if st == "waiting"}
            granted = []
            for _, _, slot_id, _, previous, new, pos in rows[i:j]:
                if previous in ("released", "timed_out", "cancelled"):
                    reborn.append(f"{slot_id} {previous} -> {new} (tx {tx})")
                if new in HELD and previous in (None, "waiting"):
                    granted.append((pos, slot_id))
                state[slot_id] = (new, pos)
            still = [state[sid][1] for sid in waiting_before if state[sid][0] == "waiting"]
            for pos, slot_id in granted:
                if still and pos > min(still):
                    skipped.append(f"{slot_id} (pos {pos}) handed out while pos {min(still)} kept waiting "
                                   f"(tx {tx})")
            grants += len(granted)
            worst = max(worst, sum(1 for st, _ in state.values() if st in HELD))
            transactions += 1
            i = j
        report.figures.append(f"slot log {name}: {len(rows)} changes in {transactions} transactions, "
                              f"{grants} grants; "
                              f"max busy+reserved {worst} (capacity {capacity})")
        report.check(f"limit {name} within capacity after every transaction (slot log)", worst <= capacity,
                     f"max {worst}, capacity {capacity}")
        report.check(f"FIFO {name}: every grant went to the head of the queue (slot log)", not skipped,
                     f"{grants} grants in order" if not skipped else f"{len(skipped)} skips: {skipped[:3]}")
        report.check(f"no {name} slot written after it ended (never granted or freed twice)", not reborn,
                     "none" if not reborn else f"{len(reborn)}: {reborn[:3]}")


def _audit_steps(report: Report, steps: list[tuple[Any, ...]], effects: list[tuple[str, str, int, int]],
                 lives: list[Life]) -> None:
    executions: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for run_id, step, pid, at in effects:
        executions[(run_id, step)].append((pid, at))
    completed = {(run_id, name): result for run_id, _, kind, name, status, result, _ in steps
                 if kind == "step" and status == "completed"}
    failed_steps = [(run_id, name) for run_id, _, kind, name, status, _, _ in steps
                    if kind == "step" and status == "failed"]
    fate = {life.pid: life for life in lives}
    never_ran = [key for key in completed if key not in executions]
    reasons: Counter[str] = Counter()
    live_twice: list[str] = []
    stale_won: list[str] = []
    for key, result in completed.items():
        runs = executions.get(key, [])
        if len(runs) < 2:
            continue
        disturbed = [(pid, at) for pid, at in runs if pid in fate and _disturbed(fate[pid])]
        undisturbed = [run for run in runs if run not in disturbed]
        if len(undisturbed) > 1:
            live_twice.append(f"{key[0]}/{key[1]} by pids {[pid for pid, _ in runs]}")
        for pid, at in disturbed:
            reasons[_why(fate[pid], at)] += 1
        # the record kept is the one of a worker that had been stopped, written by an execution after
        # its stop (so after it resumed), although a live worker had executed (and recorded) it too
        recorded_pid = int(json.loads(result).rsplit("@", 1)[1])
        life = fate.get(recorded_pid)
        if life is not None and life.stops and any(pid != recorded_pid for pid, _ in undisturbed) \
                and any(at >= life.stops[0][0] for pid, at in runs if pid == recorded_pid):
            stale_won.append(f"{key[0]}/{key[1]}")
    unrecorded = sum(1 for key in executions if key not in completed)
    report.figures.append(
        f"steps: {len(completed)} completed, {len(effects)} executions; re-executed {sum(reasons.values())} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(reasons.items())) or 'none'}); "
        f"{unrecorded} executed but never recorded (a run cancelled or a worker killed in between); "
        f"{len(failed_steps)} failed")
    report.check("every completed step executed (at least once)", not never_ran,
                 f"{len(never_ran)} without an execution {never_ran[:5]}")
    report.check("no completed step executed twice by a live worker", not live_twice,
                 f"{len(live_twice)}: {live_twice[:5]}" if live_twice else
                 f"{sum(reasons.values())} re-executions, all by killed or stopped workers")
    report.check("a stale worker's record never replaced a live owner's", not stale_won,
                 f"{len(stale_won)}: {stale_won[:5]}" if stale_won else "none")
    report.check("no step failed", not failed_steps, f"{failed_steps[:5]}" if failed_steps else "none")


def _disturbed(life: Life) -> bool:
    """Could an execution by this worker legitimately go unrecorded? Yes if the worker was killed (or
    died) later, or was stopped past its lease (it lost its runs, and a stale worker's write is refused)."""
    return life.fate in ("killed", "died", "stalled") or bool(life.stops)


def _why(life: Life, at: int) -> str:
    if life.stops:
        stopped = any(stop <= at for stop, _ in life.stops)
        return "stale worker after SIGCONT" if stopped else "worker stopped before recording"
    return f"worker {life.fate} before recording"
