"""The store contract: starts (quotas, parents, ids), reads, listing and cancellation."""

from __future__ import annotations

import pytest

from duro import ConcurrencyLimitError, DuroError
from duro.store import SCHEMA_VERSION, OwnStep, StepRecord
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
        run, created = store.insert_run(new_run(), None)
        assert created and run.status == "pending" and run.owner is None
        again, created = store.insert_run(new_run(), quota("k", 0))
        assert not created and again.id == "r1"
        assert store.get_run("r1").input == '{"a":1}'

    def test_owned_insert_starts_running(self, store):
        run, _ = store.insert_run(new_run(owner="w1"), None)
        assert run.status == "running" and run.owner == "w1"

    def test_quota_counts_active_runs_and_refuses_without_creating(self, store):
        for i in range(2):
            store.insert_run(new_run(f"r{i}", key="tenant:a"), quota("tenant:a", 2))
        with pytest.raises(ConcurrencyLimitError) as info:
            store.insert_run(new_run("r9", key="tenant:a"), quota("tenant:a", 2))
        assert (info.value.key, info.value.limit, info.value.active) == ("tenant:a", 2, 2)
        assert store.get_run("r9") is None
        store.insert_run(new_run("b1", key="tenant:b"), quota("tenant:b", 2))
        assert store.count_active("tenant:a", ["pending"], None) == 2

    def test_quota_statuses_and_namespaces(self, store):
        store.insert_run(new_run("r1", owner="w", key="k"), quota("k", 5))
        assert store_ops.finish_run(store, "r1", "w", "completed", "1", None, 2000)
        store.insert_run(new_run("r2", key="k", namespace="other"), quota("k", 5))
        assert store.count_active("k", ["pending", "running"], None) == 1
        assert store.count_active("k", ["pending", "running"], "default") == 0
        assert store.count_active("k", ["completed"], None) == 1

    def test_cancel_cascades_to_unfinished_children(self, store):
        store.insert_run(new_run("p", owner="w"), None)
        store.insert_run(new_run("c1", parent="p"), None)
        store.insert_run(new_run("c2", parent="p", owner="w"), None)
        store_ops.finish_run(store, "c2", "w", "completed", "1", None, 10)
        store.insert_run(new_run("g1", parent="c1"), None)
        assert sorted(store.cancel_run("p", None, "{}", 50)) == ["c1", "g1", "p"]
        assert store.get_run("c2").status == "completed"
        assert store.cancel_run("p", None, "{}", 60) == []
        with pytest.raises(DuroError):
            store.cancel_run("nope", None, "{}", 60)

    def test_listing_filters_and_pages(self, store):
        for i in range(5):
            run = new_run(f"r{i}", key="k" if i % 2 else None, workflow="a" if i < 3 else "b")
            run.created_at = 1000 + i
            store.insert_run(run, None)
        assert [r.id for r in store.list_runs(None, None, None, None, 10)] == ["r4", "r3", "r2", "r1", "r0"]
        assert [r.id for r in store.list_runs(None, "a", None, None, 10)] == ["r2", "r1", "r0"]
        assert [r.id for r in store.list_runs(None, None, None, "concurrency:k", 10)] == ["r3", "r1"]
        page = store.list_runs(None, None, None, None, 2)
        rest = store.list_runs(None, None, None, None, 10, (page[-1].created_at, page[-1].id))
        assert [r.id for r in page + rest] == ["r4", "r3", "r2", "r1", "r0"]
        assert [r.id for r in store.list_runs(None, None, ["pending"], None, 1)] == ["r4"]

    def test_parent_step_is_written_with_the_child(self, store):
        store.insert_run(new_run("p", owner="w"), None)
        step = StepRecord(0, "child", "kid", "waiting", 5, detail='{"run_id":"p.0"}')
        child, created = store.insert_run(new_run("p.0", parent="p"), None, OwnStep("p", "w", step))
        assert created and child.parent_id == "p"
        assert store.get_run("p").status == "blocked"
        assert [s.kind for s in store.get_steps("p")] == ["child"]

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

        store.insert_run(new_run("parent", owner="w1"), None)
        store.insert_run(new_run("taken", workflow="echo"), None)
        step = StepRecord(0, "child", "wf", "waiting", 1000)
        with pytest.raises(RunIdConflictError) as info:
            store.insert_run(new_run("taken", workflow="wf", parent="parent"), None, ("parent", "w1", step))
        assert (info.value.workflow, info.value.existing_workflow) == ("wf", "echo")
        assert store.get_steps("parent") == [] and store.get_run("parent").status == "running"
        assert store.get_run("taken").workflow == "echo"
        for start_quota in (None, quota("k", 5)):  # a top-level start, with a quota or not, is refused alike
            with pytest.raises(RunIdConflictError):
                store.insert_run(
                    new_run("taken", workflow="wf", key="k" if start_quota else None), start_quota
                )
        assert [r.id for r in store.list_runs(None, "wf", None, None, 10)] == ["parent"]  # no "taken" of wf
