"""The store contract: a run's progress: fenced commands, batches and signals."""

from __future__ import annotations

import threading

import pytest

from duro import DuroError
from duro.store import Fenced, SendSignal, StepRecord
from tests.support import store_ops
from tests.support.waiting import wait_until

from ._support import _pinged, new_run


class StepsContract:
    def test_steps_are_fenced_on_owner_and_status(self, store):
        store.runs.insert(new_run(owner="w1"), None)
        step = StepRecord(0, "step", "charge", "completed", 1000, 1001, result="5")
        assert store_ops.record_step(store, "r1", "w1", step, now=1001)
        assert not store_ops.record_step(
            store, "r1", "w2", StepRecord(1, "step", "x", "completed", 1, 2), now=1002
        )
        assert [s.name for s in store.steps.of("r1")] == ["charge"]
        waiting = StepRecord(1, "sleep", "sleep", "waiting", 1002, wake_at=5000)
        assert store_ops.record_step(store, "r1", "w1", waiting, "suspended", 5000, 1002)
        run = store.runs.get("r1")
        assert (run.status, run.wake_at) == ("suspended", 5000)
        assert store_ops.record_step(store, "r1", "w1", None, "running", None, 5000)  # woke: the run only
        run = store.runs.get("r1")
        assert (run.status, run.wake_at, run.updated_at) == ("running", None, 5000)
        assert [s.status for s in store.steps.of("r1")] == ["completed", "waiting"]
        assert not store_ops.record_step(store, "r1", "w2", None, "running", None, 5001)
        assert store_ops.finish_run(store, "r1", "w1", "completed", '"ok"', None, 6000)
        assert not store_ops.finish_run(store, "r1", "w1", "failed", None, "{}", 6001)
        assert not store_ops.record_step(
            store, "r1", "w1", StepRecord(2, "step", "late", "completed", 1, 2), now=7000
        )
        assert store.runs.get("r1").status == "completed"

    def test_signals_buffer_and_are_consumed_in_order(self, store):
        store.runs.insert(new_run(owner="w"), None)
        store.signals.send("r1", "go", '"first"', 10)
        store.signals.send("r1", "go", '"second"', 11)
        assert store.signals.signalled(["r1"]) == {("r1", "go")}
        first = store_ops.take_signal(store, "r1", "w", "go", StepRecord(0, "signal", "go", "waiting", 5, 12))
        assert first.result == '"first"' and first.status == "completed"
        second = store_ops.take_signal(
            store, "r1", "w", "go", StepRecord(1, "signal", "go", "waiting", 5, 12)
        )
        assert second.result == '"second"'
        assert (
            store_ops.take_signal(store, "r1", "w", "go", StepRecord(2, "signal", "go", "waiting", 5, 12))
            is None
        )
        store_ops.finish_run(store, "r1", "w", "completed", "null", None, 20)
        with pytest.raises(DuroError, match="completed"):
            store.signals.send("r1", "go", "null", 21)
        with pytest.raises(DuroError, match="does not exist"):
            store.signals.send("ghost", "go", "null", 21)

    def test_a_run_sends_a_signal_with_its_step_in_one_transaction(self, store):
        store.runs.insert(new_run("sender", owner="w"), None)
        store.runs.insert(new_run("target", owner="w2"), None)
        step = StepRecord(0, "send_signal", "go", "completed", 10, 10)
        assert store.steps.apply(SendSignal("sender", "w", "target", "go", '"hi"', step)) is True
        assert store.steps.of("sender") == [step]
        assert store.signals.signalled(["target"]) == {("target", "go")}
        # made again (a commit the caller did not hear of): nothing is sent twice
        assert store.steps.apply(SendSignal("sender", "w", "target", "go", '"hi"', step)) is True
        taken = StepRecord(0, "signal", "go", "waiting", 5, 12)
        assert store_ops.take_signal(store, "target", "w2", "go", taken).result == '"hi"'
        assert store_ops.take_signal(store, "target", "w2", "go", taken._replace(seq=1)) is None
        # fenced: the sender is not ours; nothing is sent and nothing written
        with pytest.raises(Fenced):
            store.steps.apply(SendSignal("sender", "other", "target", "go", "1", step._replace(seq=1)))
        assert store.signals.signalled(["target"]) == set() and len(store.steps.of("sender")) == 1
        # no such target, or one that ended: the store's error, nothing written
        with pytest.raises(DuroError, match="does not exist"):
            store.steps.apply(SendSignal("sender", "w", "ghost", "go", "1", step._replace(seq=1)))
        store_ops.finish_run(store, "target", "w2", "completed", "null", None, 20)
        with pytest.raises(DuroError, match="completed"):
            store.steps.apply(SendSignal("sender", "w", "target", "go", "1", step._replace(seq=1)))
        assert len(store.steps.of("sender")) == 1

    def test_a_batch_keeps_each_writes_fence_and_result(self, store):
        store.runs.insert(new_run("a", owner="w1"), None)
        store.runs.insert(new_run("b", owner="w2"), None)
        results = store_ops.apply_batch(
            store,
            [
                (
                    "record_step",
                    ("a", "w1", StepRecord(0, "step", "x", "completed", 1, 2, result="1"), None, None, 2),
                ),
                (
                    "record_step",
                    ("b", "w1", StepRecord(0, "step", "x", "completed", 1, 2, result="1"), None, None, 2),
                ),
                ("finish_run", ("a", "w1", "completed", '"done"', None, 3)),
                ("finish_run", ("b", "w1", "completed", '"stolen"', None, 3)),
            ],
        )
        assert results == [True, False, True, False]
        assert [s.result for s in store.steps.of("a")] == ["1"] and store.steps.of("b") == []
        assert (store.runs.get("a").status, store.runs.get("b").status) == ("completed", "running")

    def test_a_batch_of_owned_writes_applies_in_one_go_and_announces_a_childs_end(self, store):
        """No write fenced: on PostgreSQL the whole batch goes in one pipeline; each result is True,
        every write is stored, and a child's end is still announced to its parent."""
        store.runs.insert(new_run("p", owner="w1"), None)
        store.runs.insert(new_run("p.0", owner="w1", parent="p"), None)
        store.runs.insert(new_run("q", owner="w1"), None)
        heard: list[dict] = []
        stopping = threading.Event()
        listener = threading.Thread(target=store.listen, args=(heard.append, stopping), daemon=True)
        listener.start()
        try:
            if store.notifies and store.dialect == "postgresql":  # connected once a notice gets through
                wait_until(lambda: _pinged(store, heard), what="the listener to connect")
            results = store_ops.apply_batch(
                store,
                [
                    (
                        "record_step",
                        (
                            "p.0",
                            "w1",
                            StepRecord(0, "step", "x", "completed", 1, 2, result="1"),
                            None,
                            None,
                            2,
                        ),
                    ),
                    (
                        "record_step",
                        (
                            "q",
                            "w1",
                            StepRecord(0, "sleep", "sleep", "waiting", 1, wake_at=9),
                            "suspended",
                            9,
                            2,
                        ),
                    ),
                    ("finish_run", ("p.0", "w1", "completed", '"done"', None, 3)),
                    ("record_step", ("p", "w1", None, "running", None, 3)),
                ],
            )
            assert results == [True, True, True, True]
            assert [s.result for s in store.steps.of("p.0")] == ["1"]
            assert (store.runs.get("q").status, store.runs.get("q").wake_at) == ("suspended", 9)
            assert store.runs.get("p.0").status == "completed"
            if store.notifies and store.dialect == "postgresql":  # SQLite says only "changed"
                wait_until(
                    lambda: {"kind": "done", "run_id": "p.0", "status": "completed"} in heard,
                    what="the child's end to be announced",
                )
        finally:
            stopping.set()
            listener.join(5)
