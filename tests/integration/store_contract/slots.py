"""The store contract: limits' slots: each decision in one transaction, fenced on the hook step's run."""

from __future__ import annotations

import pytest

from duro.store import StepRecord
from tests.support import store_ops

from ._support import _queued_with_hook, new_run


class SlotsContract:
    @pytest.mark.parametrize("owner, taken", [("w1", True), ("someone-else", False)])
    def test_a_release_hands_the_slot_straight_to_a_waiter_of_its_own_process(self, store, owner, taken):
        """``waiting_here`` (the caller's idle waiters): the head of the queue takes the slot in the release's
        transaction, its hook step written completed, when the write passes its run's fence; otherwise
        the slot is reserved for it as usual."""
        from duro.definitions._config import LimitConfig

        config = LimitConfig("line", capacity=1, max_hold_ms=60_000)
        store.runs.insert(new_run("holder", owner="w1"), None)
        store.runs.insert(new_run("waiter", owner="w1"), None)
        assert store_ops.slot_request(store, config, "h.1", "holder", None, None, 1000).state == "busy"
        assert store_ops.slot_request(store, config, "w.1", "waiter", None, 9000, 1000).state == "waiting"
        hook = StepRecord(1, "hook", "Esperando hueco · line", "waiting", 1000, wake_at=9000)
        _, released, granted = store_ops.slot_release(
            store, {"line": config}, "h.1", 2000, waiting_here={"w.1": ("waiter", owner, hook)}
        )
        assert released and [row.id for row in granted] == ["w.1"]
        assert granted[0].state == ("busy" if taken else "reserved")
        assert hook.status == "waiting"  # the caller's record is not touched: the store wrote a copy
        steps = {s.seq: s for s in store.steps.of("waiter")}
        if taken:
            assert (steps[1].status, steps[1].ended_at, granted[0].expires_at) == ("completed", 2000, 62_000)
            assert '"id": "w.1"' in steps[1].result
        else:
            assert 1 not in steps and granted[0].reserved_until == 2000 + 120_000
        assert store.limits.states()["line"].busy == (1 if taken else 0)

    def test_a_slot_decision_whose_run_is_no_longer_the_callers_changes_nothing(self, store):
        """The hook step's fence is checked after the decision's writes are sent (pipelined on
        PostgreSQL): a run that is not the caller's rolls the whole decision back."""
        from duro.definitions._config import LimitConfig
        from duro.store import Fenced

        config = LimitConfig("line", capacity=1, max_hold_ms=60_000)
        store.runs.insert(new_run("holder", owner="w1"), None)
        store_ops.slot_request(store, config, "h.1", "holder", None, None, 1000)
        step = StepRecord(2, "release", "release_slot", "completed", 2000, 2000)
        with pytest.raises(Fenced):
            store_ops.slot_release(store, {"line": config}, "h.1", 2000, hook=("holder", "w2", step))
        assert store.slots.get("h.1").state == "busy"
        assert store.limits.states()["line"].busy == 1
        assert [s.seq for s in store.steps.of("holder")] == []
        _, released, _ = store_ops.slot_release(
            store, {"line": config}, "h.1", 2000, hook=("holder", "w1", step)
        )
        assert released and [s.seq for s in store.steps.of("holder")] == [2]

    def test_ended_runs_leave_every_queue_they_wait_in_and_hand_the_places_on(self, store):
        """``slots_leave`` with runs waiting in two limits (taken in name order: see the store): each
        leaves its queue, the next in line moves up, and busy slots stay held."""
        from duro.definitions._config import LimitConfig

        configs = {name: LimitConfig(name, capacity=1, max_hold_ms=60_000) for name in ("b-line", "a-line")}
        for name in configs:
            store_ops.slot_request(store, configs[name], f"{name}.holder", "holder", None, None, 1000)
            store_ops.slot_request(
                store, configs[name], f"{name}.leaving", f"leaving-{name}", None, None, 1000
            )
            store_ops.slot_request(store, configs[name], f"{name}.next", f"next-{name}", None, None, 1000)
        assert store.slots.leave(configs, ["leaving-b-line", "leaving-a-line", "holder"], 2000) == []
        for name in configs:
            assert store.slots.get(f"{name}.leaving").state not in ("waiting", "reserved", "busy")
            assert store.slots.get(f"{name}.holder").state == "busy"  # ending a run never releases its slot
            assert [(s.id, s.state) for s in store.limits.slots(name)] == [
                (f"{name}.holder", "busy"),
                (f"{name}.next", "waiting"),
            ]
            assert (store.limits.states()[name].busy, store.limits.states()[name].waiting) == (1, 1)

    @pytest.mark.parametrize("ending", ["cancelled", "failed"])
    def test_a_run_that_ends_while_queued_has_its_hook_step_closed_with_its_end(self, store, ending):
        """``slots_leave`` closes the run's waiting hook step in its transaction: ended then, with the
        run's end as status. A step that is not a waiting hook is left as it is."""
        from duro.definitions._config import LimitConfig

        config = LimitConfig("lines", capacity=1, max_hold_ms=60_000)
        store_ops.slot_request(store, config, "holder.0", "holder", None, None, 1000)
        _queued_with_hook(store, config, "leaver", 1000)
        store_ops.record_step(
            store, "leaver", "w1", StepRecord(1, "step", "other", "completed", 1000, 1001), now=1001
        )
        if ending == "cancelled":  # requested, then ended by its worker
            assert store.runs.cancel("leaver", None, '{"type": "RunCancelled"}', 4000).requested == ["leaver"]
            assert store_ops.finish_run(
                store, "leaver", "w1", "cancelled", None, '{"type": "RunCancelled"}', 5000
            )
        else:
            assert store_ops.finish_run(
                store, "leaver", "w1", "failed", None, '{"type": "RuntimeError"}', 5000
            )
        assert store.slots.leave({"lines": config}, ["leaver"], 5000) == []
        hook, other = store.steps.of("leaver")
        assert (hook.kind, hook.status, hook.ended_at) == ("hook", ending, 5000)
        assert (other.status, other.ended_at) == ("completed", 1001)
        assert store.slots.get("leaver.0").state == "cancelled"
        assert store.slots.leave({"lines": config}, ["leaver"], 9000) == []  # again: nothing changes
        assert store.steps.of("leaver")[0].ended_at == 5000

    @pytest.mark.parametrize("state", ["waiting", "reserved", "busy"])
    def test_a_cancelled_waiter_leaves_the_queue_with_whatever_it_was_handed(self, store, state):
        """``GiveUpSlot(cancelled=True)``: the request leaves the queue and its hook step is closed
        cancelled in one transaction; a slot reserved for it, or handed to it a moment before, goes
        straight to the next run in the queue."""
        from duro.definitions._config import LimitConfig
        from duro.store import GiveUpSlot, OwnStep

        config = LimitConfig("lines", capacity=1, max_hold_ms=60_000)
        store.runs.insert(new_run("holder", owner="w1"), None)
        store_ops.slot_request(store, config, "holder.0", "holder", None, None, 1000)
        _queued_with_hook(store, config, "leaver", 1000)
        _queued_with_hook(store, config, "next", 1001)
        if state != "waiting":
            waiting_here = (
                {"leaver.0": ("leaver", "w1", store.steps.of("leaver")[0])} if state == "busy" else None
            )
            _, released, granted = store_ops.slot_release(
                store, {"lines": config}, "holder.0", 2000, waiting_here=waiting_here
            )
            assert released and [(row.id, row.state) for row in granted] == [("leaver.0", state)]
        hook = store.steps.of("leaver")[0]._replace(status="cancelled", ended_at=3000)
        left = store.steps.apply(GiveUpSlot(config, "leaver.0", 3000, OwnStep("leaver", "w1", hook), True))
        assert (left.row.state, left.step.status) == (
            "released" if state == "busy" else "cancelled",
            "cancelled",
        )
        assert store.steps.of("leaver")[0].status == "cancelled"
        expected = [] if state == "waiting" else [("next.0", "reserved")]
        assert [(row.id, row.state) for row in left.granted] == expected
        active = {s.id: s.state for s in store.limits.slots("lines", 10)}
        assert "leaver.0" not in active
        assert active["next.0"] == ("waiting" if state == "waiting" else "reserved")

    def test_an_expired_request_still_closes_its_hook_step_when_its_run_gives_up(self, store):
        """The expiry pass timed the request out before its run woke: the run's give-up writes its hook
        step failed all the same (a run that catches SlotTimeoutError goes on with a closed step)."""
        from duro.definitions._config import LimitConfig

        config = LimitConfig("lines", capacity=1, max_hold_ms=60_000)
        store_ops.slot_request(store, config, "holder.0", "holder", None, None, 1000)
        _queued_with_hook(store, config, "late", 1000, timeout_at=3000)
        store.slots.expire({"lines": config}, 3000)
        assert store.slots.get("late.0").state == "timed_out"
        failed = StepRecord(
            0, "hook", "Esperando hueco · lines", "failed", 1000, 3500, wake_at=3000, error='{"a": 1}'
        )
        assert (
            store_ops.slot_give_up(store, config, "late.0", 3500, ("late", "w1", failed)).state == "timed_out"
        )
        (hook,) = store.steps.of("late")
        assert (hook.status, hook.ended_at) == ("failed", 3500)

    def test_a_released_reservation_goes_back_to_the_queue_and_the_slot_to_the_next_run(self, store):
        """An operator release of a reserved slot (its run has not confirmed) is no timeout: as a
        lapsed reservation, the run queues last with what is left of its timeout, and the slot goes
        to the next run; a reservation whose timeout has passed times out."""
        from duro.definitions._config import LimitConfig

        configs = {"lines": LimitConfig("lines", capacity=1, max_hold_ms=60_000)}
        config = configs["lines"]
        store_ops.slot_request(store, config, "holder.0", "holder", None, None, 1000)
        store_ops.slot_request(store, config, "first.0", "first", None, 50_000, 1000)
        store_ops.slot_request(store, config, "second.0", "second", None, None, 1000)
        _, released, granted = store_ops.slot_release(store, configs, "holder.0", 2000)
        assert released and [(r.id, r.state) for r in granted] == [("first.0", "reserved")]
        row, released, granted = store_ops.slot_release(store, configs, "first.0", 3000, "operator")
        assert released and (row.id, row.state, row.timeout_at) == ("first.0", "waiting", 50_000)
        assert [(r.id, r.state) for r in granted] == [("second.0", "reserved")]
        assert [(s.id, s.state) for s in store.limits.slots("lines")] == [
            ("second.0", "reserved"),
            ("first.0", "waiting"),
        ]
        assert (
            store_ops.slot_release(store, configs, "first.0", 3001, "operator")[1] is False
        )  # waiting: nothing to release
        store_ops.slot_confirm(store, config, "second.0", 3002)
        store_ops.slot_release(store, configs, "second.0", 4000)
        assert store.slots.get("first.0").state == "reserved"
        row, released, granted = store_ops.slot_release(
            store, configs, "first.0", 60_000, "operator"
        )  # past its timeout
        assert released and row.state == "timed_out" and granted == []
        counts = store.limits.states()["lines"]
        assert (counts.busy, counts.reserved, counts.waiting) == (0, 0, 0)
