"""A sync step's thread runs the body only for a run that is still its worker's.

A worker that thaws after a freeze longer than its lease finds its row gone: it drops every run it
holds (each one's ``fatal`` set) and joins again, so its lease is good again at once. A step call
handed to a thread before the freeze, and picked up only after that, must not run its body: the
thread checks the run's own state as well as the lease (the chaos suite on PostgreSQL caught a body
starting there, seed 414235)."""

from __future__ import annotations

from types import SimpleNamespace

from duro.run._context import RunContext
from duro.run._runtime import LostRun, Runtime
from duro.store import RunRecord


class _Lease:
    def __init__(self, good: bool) -> None:
        self.good = good
        self.lease = SimpleNamespace(good_until=None)  # what a run reads at its resumes (unused here)

    def owns_runs(self) -> bool:
        return self.good

    async def confirm(self) -> None:
        return None


def _context(lease: _Lease) -> RunContext:
    clock = SimpleNamespace(now_ms=lambda: 0, monotonic_ms=lambda: 0, sleep_until=None)
    events = SimpleNamespace(publish=lambda *args, **kwargs: None)
    runtime = Runtime(
        worker_id="w",
        clock=clock,  # type: ignore[arg-type]  # only what RunContext reads
        gateway=None,  # type: ignore[arg-type]
        events=events,  # type: ignore[arg-type]
        registry=None,  # type: ignore[arg-type]
        starter=None,  # type: ignore[arg-type]
        wakeups=None,  # type: ignore[arg-type]
        lease=lease,
        hooks=None,  # type: ignore[arg-type]
        step_executor=None,  # type: ignore[arg-type]
        handle=lambda run_id: None,
        slots=None,  # type: ignore[arg-type]
        rates=None,  # type: ignore[arg-type]
        residency=None,  # type: ignore[arg-type]
        redrive=None,  # type: ignore[arg-type]
    )
    run = RunRecord(
        "r", "default", "wf", "1", "running", None, None, None, [], None, None, None, "w", None, 0, 0, None
    )
    return RunContext(runtime, run)


def _step(calls: list[str]) -> SimpleNamespace:
    return SimpleNamespace(fn=lambda: calls.append("body") or "done")


def test_the_body_runs_for_a_run_its_worker_owns():
    calls: list[str] = []
    assert _context(_Lease(True))._call_if_owned(_step(calls), (), {}) == "done"  # type: ignore[arg-type]
    assert calls == ["body"]


def test_no_body_runs_once_the_lease_lapsed():
    calls: list[str] = []
    outcome = _context(_Lease(False))._call_if_owned(_step(calls), (), {})  # type: ignore[arg-type]
    assert outcome != "done" and calls == []


def test_no_body_runs_for_a_dropped_run_even_with_the_lease_good_again():
    calls: list[str] = []
    ctx = _context(_Lease(True))  # the worker joined again: its lease is good
    ctx.fatal = LostRun("r")  # but this run was dropped before it did
    outcome = ctx._call_if_owned(_step(calls), (), {})  # type: ignore[arg-type]
    assert outcome != "done" and calls == []
