"""A serial workflow's runs start one at a time, oldest first, among the versions the claiming
worker has: the oldest pending run, of a version no live worker has, waits for such a worker
without holding the others up for ever (on both stores)."""

from __future__ import annotations

import dataclasses

from duro.store import Claim, FinishRun, SqlStore
from tests.integration.store_contract._support import new_run


def _pending(store: SqlStore, run_id: str, version: str, created_at: int) -> None:
    run = dataclasses.replace(new_run(run_id, workflow="nightly"), version=version, created_at=created_at)
    store.runs.insert(run, None)


def _claim(store: SqlStore, worker: str, versions: list[str], now: int) -> list[str]:
    claim = Claim(
        worker,
        "default",
        ["nightly"],
        now=now,
        serial=["nightly"],
        versions=[("nightly", v) for v in versions],
    )
    return [run.id for run in store.runs.claim(claim)]


def test_the_oldest_pending_run_of_a_missing_version_does_not_block_the_others(database_url: str):
    store = SqlStore(database_url)
    try:
        _pending(store, "old-v1", "1", 1000)  # oldest, and no worker below has version 1
        _pending(store, "a-v2", "2", 2000)
        _pending(store, "b-v2", "2", 3000)
        assert _claim(store, "w2", ["2"], 5000) == ["a-v2"]  # the oldest of its own versions
        assert _claim(store, "w2", ["2"], 6000) == []  # one at a time: a-v2 is active
        assert store.steps.apply(FinishRun("a-v2", "w2", "completed", "null", None, 7000, None))
        assert _claim(store, "w2", ["2"], 8000) == ["b-v2"]
        assert store.steps.apply(FinishRun("b-v2", "w2", "completed", "null", None, 9000, None))
        assert _claim(store, "w1", ["1", "2"], 10_000) == ["old-v1"]  # a worker with version 1
    finally:
        store.close()
