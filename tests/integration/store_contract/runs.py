"""The store contract: starts (quotas, parents, ids), reads, listing and cancellation."""

from __future__ import annotations

import pytest

from duro import ConcurrencyLimitError, DuroError
from duro.store import SCHEMA_VERSION, Claim, Evict, OwnStep, StepRecord, Waiting
from tests.support import store_ops

from ._support import _start_together, new_run, quota


class RunsContract:
    def test_schema_version_is_recorded_and_creation_is_idempotent(self, store, make_store):
        assert store.schema_version() == SCHEMA_VERSION
        again = make_store()
        again.create_schema()
        assert again.schema_version() == SCHEMA_VERSION
        again.close()

    def test_insert_is_idempotent_by_id(self, store):
        run, created = store.runs.insert(new_run(), None)
        assert created and run.status == "pending" and run.owner is None
        again, created = store.runs.insert(new_run(), quota("k", 0))
        assert not created and again.id == "r1"
        assert store.runs.get("r1").input == '{"a":1}'

    def test_recent_durations_are_a_keys_last_completed_runs_latest_end_first(self, store):
        for i, (ends, status) in enumerate(
            [(1500, "completed"), (4000, "completed"), (9000, "failed"), (3000, "completed")]
        ):
            store.runs.insert(new_run(f"r{i}", owner="w", key="tenant:a"), None)  # created at 1000
            store_ops.finish_run(store, f"r{i}", "w", status, "null", None, ends)
        store.runs.insert(new_run("other", owner="w", key="tenant:b", namespace="elsewhere"), None)
        store_ops.finish_run(store, "other", "w", "completed", "null", None, 99_000)
        store.runs.insert(new_run("active", key="tenant:a"), None)
        assert store.runs.recent_durations("tenant:a", None, 20) == [3000, 2000, 500]
        assert store.runs.recent_durations("tenant:a", None, 2) == [3000, 2000]
        assert store.runs.recent_durations("tenant:b", "default", 20) == []
        assert store.runs.recent_durations("tenant:b", "elsewhere", 20) == [98_000]
        assert store.runs.recent_durations("nobody", None, 20) == []

    def test_owned_insert_starts_running(self, store):
        run, _ = store.runs.insert(new_run(owner="w1"), None)
        assert run.status == "running" and run.owner == "w1"

    def test_quota_counts_active_runs_and_refuses_without_creating(self, store):
        for i in range(2):
            store.runs.insert(new_run(f"r{i}", key="tenant:a"), quota("tenant:a", 2))
        with pytest.raises(ConcurrencyLimitError) as info:
            store.runs.insert(new_run("r9", key="tenant:a"), quota("tenant:a", 2))
        assert (info.value.key, info.value.limit, info.value.active) == ("tenant:a", 2, 2)
        assert store.runs.get("r9") is None
        store.runs.insert(new_run("b1", key="tenant:b"), quota("tenant:b", 2))
        assert store.runs.count_active("tenant:a", ["pending"], None) == 2

    def test_quota_statuses_and_namespaces(self, store):
        store.runs.insert(new_run("r1", owner="w", key="k"), quota("k", 5))
        assert store_ops.finish_run(store, "r1", "w", "completed", "1", None, 2000)
        store.runs.insert(new_run("r2", key="k", namespace="other"), quota("k", 5))
        assert store.runs.count_active("k", ["pending", "running"], None) == 1
        assert store.runs.count_active("k", ["pending", "running"], "default") == 0
        assert store.runs.count_active("k", ["completed"], None) == 1

    def test_cancel_cascades_to_unfinished_children(self, store):
        """A run nobody holds that never made a durable call ends at once; one held by a worker gets
        the request (its worker delivers it), and so does each unfinished descendant."""
        store.runs.insert(new_run("p", owner="w"), None)
        store.runs.insert(new_run("c1", parent="p"), None)
        store.runs.insert(new_run("c2", parent="p", owner="w"), None)
        store_ops.finish_run(store, "c2", "w", "completed", "1", None, 10)
        store.runs.insert(new_run("g1", parent="c1"), None)
        outcome = store.runs.cancel("p", None, "{}", 50)
        assert (outcome.requested, sorted(outcome.ended)) == (["p"], ["c1", "g1"])
        assert [store.runs.get(r).status for r in ("p", "c1", "c2", "g1")] == [
            "running",
            "cancelled",
            "completed",
            "cancelled",
        ]
        assert store.runs.get("p").cancel_requested_at == 50
        assert store.runs.cancel_requested(["p", "c1", "c2"]) == {"p"}
        again = store.runs.cancel("p", None, "{}", 60)  # asked again: the first request's time stays
        assert (again.requested, again.ended, store.runs.get("p").cancel_requested_at) == (["p"], [], 50)
        assert store_ops.finish_run(store, "p", "w", "cancelled", None, "{}", 70)
        assert store.runs.cancel("p", None, "{}", 80) == ([], [])  # an ended run: nothing to do
        assert store.runs.cancel_requested(["p"]) == set()
        with pytest.raises(DuroError):
            store.runs.cancel("nope", None, "{}", 60)

    def test_a_cancel_request_makes_the_run_due_whoever_held_it(self, store, make_store):
        """A run evicted with a history, or held by a worker that dies before it delivers, is due:
        whoever takes it up next delivers the cancel. Hand-backs and evicts keep it due."""
        store.workers.register("w", "default", "h", 1, 1)
        store.runs.insert(new_run("asleep", owner="w"), None)
        sleep = StepRecord(0, "sleep", "sleep", "waiting", 10, wake_at=10**9)
        assert store_ops.record_step(store, "asleep", "w", sleep, "suspended", 10**9, now=10)
        store.runs.insert(new_run("held", owner="w"), None)
        signal = StepRecord(0, "signal", "go", "waiting", 10)
        assert store_ops.record_step(store, "held", "w", signal, "suspended", None, now=10)
        assert store.steps.apply(Evict("w", (Waiting("asleep", "sleep", None, 10**9),), 20)) == ["asleep"]
        assert store.runs.get("asleep").owner is None
        outcome = store.runs.cancel("asleep", None, "{}", 30)
        assert (outcome.requested, outcome.ended) == (["asleep"], [])  # it has a history: delivered
        store.runs.cancel("held", None, "{}", 30)
        # the holder writes its wait once more before it hears (a notice on its way), then dies
        assert store_ops.record_step(store, "held", "w", signal, "suspended", None, now=40)
        store.workers.remove("w", 50)
        claimed = store.runs.claim(Claim("w2", "default", ["wf"], now=60))
        assert sorted((run.id, run.cancel_requested_at) for run in claimed) == [("asleep", 30), ("held", 30)]

    def test_a_cancelled_end_closes_the_calls_it_waited_on(self, store):
        """``FinishRun(cancelled)`` closes the run's waiting records in its transaction: a signal wait,
        and a sleep that was its last call; an earlier sleep, over already, stays as it was."""
        store.runs.insert(new_run("r", owner="w"), None)
        steps = [
            StepRecord(0, "sleep", "sleep", "waiting", 10, wake_at=20),
            StepRecord(1, "signal", "go", "waiting", 30),
            StepRecord(2, "sleep", "sleep", "waiting", 40, wake_at=10**9),
        ]
        for step in steps:
            assert store_ops.record_step(
                store, "r", "w", step, "suspended", step.wake_at, now=step.started_at
            )
        assert store_ops.finish_run(store, "r", "w", "cancelled", None, "{}", 100)
        assert [(s.seq, s.status, s.ended_at) for s in store.steps.of("r")] == [
            (0, "waiting", None),
            (1, "cancelled", 100),
            (2, "cancelled", 100),
        ]
        store.runs.insert(new_run("f", owner="w"), None)
        assert store_ops.record_step(store, "f", "w", steps[1], "suspended", None, now=30)
        assert store_ops.finish_run(store, "f", "w", "failed", None, "{}", 100)
        assert [s.status for s in store.steps.of("f")] == ["waiting"]  # only a cancel closes them

    def test_listing_filters_and_pages(self, store):
        for i in range(5):
            run = new_run(f"r{i}", key="k" if i % 2 else None, workflow="a" if i < 3 else "b")
            run.created_at = 1000 + i
            store.runs.insert(run, None)
        assert [r.id for r in store.runs.page(None, None, None, None, 10)] == ["r4", "r3", "r2", "r1", "r0"]
        assert [r.id for r in store.runs.page(None, "a", None, None, 10)] == ["r2", "r1", "r0"]
        assert [r.id for r in store.runs.page(None, None, None, "concurrency:k", 10)] == ["r3", "r1"]
        page = store.runs.page(None, None, None, None, 2)
        rest = store.runs.page(None, None, None, None, 10, (page[-1].created_at, page[-1].id))
        assert [r.id for r in page + rest] == ["r4", "r3", "r2", "r1", "r0"]
        assert [r.id for r in store.runs.page(None, None, ["pending"], None, 1)] == ["r4"]

    def test_parent_step_is_written_with_the_child(self, store):
        store.runs.insert(new_run("p", owner="w"), None)
        step = StepRecord(0, "child", "kid", "waiting", 5, detail='{"run_id":"p.0"}')
        child, created = store.runs.insert(new_run("p.0", parent="p"), None, OwnStep("p", "w", step))
        assert created and child.parent_id == "p"
        assert store.runs.get("p").status == "blocked"
        assert [s.kind for s in store.steps.of("p")] == ["child"]

    @pytest.mark.parametrize("with_quota", [False, True], ids=["plain", "with a quota"])
    def test_concurrent_starts_of_one_run_id_create_it_once(self, store, with_quota):
        """Processes starting the same run id at once: one creates it, every other gets that run back
        (on PostgreSQL their inserts race past each other's existence check)."""
        for attempt in range(10):
            run_id = f"same-{attempt}"
            results = _start_together(
                store,
                6,
                new_run(run_id, key="k" if with_quota else None),
                quota("k", 100) if with_quota else None,
            )
            assert all(isinstance(r, tuple) for r in results), results
            assert sorted(created for _, created in results) == [False] * 5 + [True]
            assert {record.id for record, _ in results} == {run_id}

    def test_a_start_on_another_workflows_run_id_is_a_conflict_and_writes_nothing(self, store):
        from duro import RunIdConflictError

        store.runs.insert(new_run("parent", owner="w1"), None)
        store.runs.insert(new_run("taken", workflow="echo"), None)
        step = StepRecord(0, "child", "wf", "waiting", 1000)
        with pytest.raises(RunIdConflictError) as info:
            store.runs.insert(new_run("taken", workflow="wf", parent="parent"), None, ("parent", "w1", step))
        assert (info.value.workflow, info.value.existing_workflow) == ("wf", "echo")
        assert store.steps.of("parent") == [] and store.runs.get("parent").status == "running"
        assert store.runs.get("taken").workflow == "echo"
        for start_quota in (None, quota("k", 5)):  # a top-level start, with a quota or not, is refused alike
            with pytest.raises(RunIdConflictError):
                store.runs.insert(
                    new_run("taken", workflow="wf", key="k" if start_quota else None), start_quota
                )
        assert [r.id for r in store.runs.page(None, "wf", None, None, 10)] == ["parent"]  # no "taken" of wf
