"""What the contract's tests share: records to start with, and helpers that drive a store."""

from __future__ import annotations

import threading
from typing import Any

from duro.store import NewRun, QuotaCheck, StepRecord, Store
from tests.support import store_ops


def new_run(run_id="r1", owner=None, key=None, workflow="wf", namespace="default", parent=None):
    return NewRun(
        id=run_id,
        namespace=namespace,
        workflow=workflow,
        version="1",
        input='{"a":1}',
        owner=owner,
        created_at=1000,
        tags=[f"concurrency:{key}"] if key else [],
        concurrency_key=key,
        parent_id=parent,
    )


def quota(key, limit, statuses=("pending", "running", "suspended", "blocked"), namespace=None):
    return QuotaCheck(workflow="wf", key=key, limit=limit, statuses=statuses, namespace=namespace)


def _pinged(store: Store, heard: list[dict]) -> bool:
    """Whether a notice sent now reaches ``heard`` (deleting a schedule announces its namespace)."""
    store.schedules.delete("ping", "ping")
    return {"kind": "sched", "namespace": "ping"} in heard


def _start_together(store: Store, starters: int, run: NewRun, check: QuotaCheck | None) -> list[Any]:
    """``starters`` threads insert ``run`` at the same instant; what each got (or raised)."""
    barrier = threading.Barrier(starters)
    results: list[Any] = []

    def start() -> None:
        barrier.wait(10)
        try:
            results.append(store.runs.insert(run, check))
        except Exception as err:  # noqa: BLE001 - the caller's assertion shows it
            results.append(err)

    threads = [threading.Thread(target=start) for _ in range(starters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def _queued_with_hook(store, config, run_id, now, timeout_at=None):
    """A run of worker w1 whose slot request waits in ``config``'s queue, its hook step written with it."""
    store.runs.insert(new_run(run_id, owner="w1"), None)
    hook = StepRecord(0, "hook", f"Esperando hueco · {config.name}", "waiting", now, wake_at=timeout_at)
    row = store_ops.slot_request(
        store, config, f"{run_id}.0", run_id, None, timeout_at, now, (run_id, "w1", hook)
    )
    assert row.state == "waiting"
