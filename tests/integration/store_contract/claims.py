"""The store contract: workers, leases and claims."""

from __future__ import annotations

import dataclasses

from duro.store import Claim

from ._support import new_run


class ClaimsContract:
    def test_claims_take_unowned_and_expired_workers_runs_once(self, store):
        store.workers.register("alive", "default", "h", 1, 1000)
        store.workers.register("dead", "default", "h", 2, 0)
        store.runs.insert(new_run("free"), None)
        store.runs.insert(new_run("mine", owner="alive"), None)
        store.runs.insert(new_run("orphan", owner="dead"), None)
        store.runs.insert(new_run("gone", owner="a-worker-without-a-row"), None)
        store.runs.insert(new_run("other-wf", workflow="else"), None)
        store.runs.insert(new_run("other-ns", namespace="x"), None)
        stamps = store.workers.heartbeat("alive", 1000)
        assert set(stamps) == {"alive", "dead"}
        claim = Claim(worker_id="alive", namespace="default", workflows=["wf"], now=1000)
        claimed = {run.id: run for run in store.runs.claim(claim)}
        assert set(claimed) == {"free"}  # a registered owner is alive until its lease is found expired
        claimed = {run.id: run for run in store.runs.claim(dataclasses.replace(claim, orphans=True))}
        assert set(claimed) == {"gone"}  # an owner with no row: its runs go back when asked
        assert claimed["gone"].owner == "alive"
        stale = Claim(
            worker_id="alive",
            namespace="default",
            workflows=["wf"],
            now=1000,
            expired=[("dead", stamps["dead"] - 1)],
        )
        assert store.runs.claim(stale) == []  # its heartbeat is not the one the claimer saw: it lives
        expired = Claim(
            worker_id="alive",
            namespace="default",
            workflows=["wf"],
            now=1000,
            expired=[("dead", stamps["dead"])],
        )
        assert [run.id for run in store.runs.claim(expired)] == ["orphan"]
        assert (
            store.workers.heartbeat("dead", 1001) is None
        )  # its row went with the claim: it finds out at once
        assert store.runs.claim(claim) == []

    def test_remove_worker_hands_runs_back(self, store):
        store.workers.register("w", "default", "h", 1, 1000)
        store.runs.insert(new_run("r1", owner="w"), None)
        store.workers.remove("w", 2000)
        run = store.runs.get("r1")
        assert run.owner is None and run.status == "running"
        assert store.workers.heartbeat("w", 3000) is None

    def test_handing_runs_back_and_taking_them_up_change_no_runs_record(self, store):
        """Ownership is bookkeeping (a dev server's reload does both): a hand-back, by a worker that
        stops or joins again, and a claim of a run that had started leave ``updated_at`` as it was; a
        claim that starts a pending run changes it."""
        store.workers.register("w1", "default", "h", 1, 1000)
        store.runs.insert(new_run("started", owner="w1"), None)
        store.runs.insert(new_run("pending"), None)
        store.workers.remove("w1", 2000)
        assert (store.runs.get("started").owner, store.runs.get("started").updated_at) == (None, 1000)
        store.workers.register("w2", "default", "h", 2, 3000)
        claim = Claim(worker_id="w2", namespace="default", workflows=["wf"], now=3000)
        claimed = {run.id: run for run in store.runs.claim(claim)}
        assert (claimed["started"].owner, claimed["started"].updated_at) == ("w2", 1000)
        assert (claimed["pending"].status, claimed["pending"].updated_at) == ("running", 3000)
        assert store.runs.get("started").updated_at == 1000
        store.workers.register("w2", "default", "h", 2, 4000)  # joins again: its runs are handed back
        assert [(r.owner, r.updated_at) for r in map(store.runs.get, ("started", "pending"))] == [
            (None, 1000),
            (None, 3000),
        ]
