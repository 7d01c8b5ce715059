"""Prometheus metrics (duro.metrics): each family moved by exactly what happened, under the simulated
clock; the gauges read from the store; no label carries a key, a label or a run id."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from duro import (
    Concurrency,
    ConcurrencyLimitError,
    acquire_slot,
    release_slot,
    wait_for_signal,
    workflow,
)
from duro.metrics import Meter, collector

pytestmark = pytest.mark.duro(project="tests/integration/harness_project")


@workflow
async def call(inp: dict) -> str:
    slot = await acquire_slot("voice-calls", label=f"customer-{inp['n']}", timeout=inp.get("timeout", "1h"))
    if inp.get("keep"):
        await wait_for_signal("never", timeout="2h")  # holds past max_hold (45m): expired
        return slot.id
    await wait_for_signal("done", timeout="1h")
    await release_slot(slot.id)
    return slot.id


@workflow(concurrency=Concurrency(key=lambda inp: f"tenant:{inp['tenant']}", limit=1))
async def turn(inp: dict) -> None:
    await wait_for_signal("done", timeout="1h")


def scrape(engine) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(collector(engine))
    samples = {}
    for family in registry.collect():
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_slots_grant_wait_release_timeout_and_expiry_move_each_metric(duro_env):
    samples = scrape(duro_env.engine)  # counting starts here
    assert value(samples, "duro_limit_capacity", limit="voice-calls") == 1
    assert value(samples, "duro_limit_capacity", limit="partner-api") == 2

    first = await duro_env.start(call, {"n": 1})
    second = await duro_env.start(call, {"n": 2})
    third = await duro_env.start(call, {"n": 3, "timeout": "10m"})
    await duro_env.run_until_idle()
    samples = scrape(duro_env.engine)
    assert value(samples, "duro_limit_busy", limit="voice-calls") == 1
    assert value(samples, "duro_limit_waiting", limit="voice-calls") == 2
    assert value(samples, "duro_slot_wait_seconds_count", limit="voice-calls") == 1  # granted at once

    await duro_env.advance("15m")  # the third times out in the queue
    await first.signal("done")
    await duro_env.run_until_idle()  # released after 15 minutes; the second takes it, after 15 minutes
    samples = scrape(duro_env.engine)
    assert value(samples, "duro_slot_timeouts_total", limit="voice-calls") == 1
    assert value(samples, "duro_slot_wait_seconds_count", limit="voice-calls") == 2
    assert value(samples, "duro_slot_wait_seconds_sum", limit="voice-calls") == pytest.approx(15 * 60)
    assert value(samples, "duro_slot_hold_seconds_count", limit="voice-calls") == 1
    assert value(samples, "duro_slot_hold_seconds_sum", limit="voice-calls") == pytest.approx(15 * 60)
    assert value(samples, "duro_slot_wait_seconds_bucket", limit="voice-calls", le="900.0") == 2
    assert value(samples, "duro_slot_wait_seconds_bucket", limit="voice-calls", le="300.0") == 1
    assert value(samples, "duro_slot_expired_total", limit="voice-calls") == 0

    await second.signal("done")
    keeper = await duro_env.start(call, {"n": 4, "keep": True})
    await duro_env.run_until_idle()
    await duro_env.advance("50m")  # past max_hold: taken back, a lost release
    samples = scrape(duro_env.engine)
    assert value(samples, "duro_slot_expired_total", limit="voice-calls") == 1
    assert value(samples, "duro_slot_hold_seconds_count", limit="voice-calls") == 3
    assert value(samples, "duro_limit_busy", limit="voice-calls") == 0
    assert value(samples, "duro_runs_started_total", workflow=call.name) == 4
    assert value(samples, "duro_runs_finished_total", workflow=call.name, status="completed") == 2
    assert value(samples, "duro_runs_finished_total", workflow=call.name, status="failed") == 1  # the timeout
    assert value(samples, "duro_run_duration_seconds_count", workflow=call.name) == 3
    assert await duro_env.status(third) == "failed"
    assert await duro_env.status(keeper) in ("running", "suspended")

    labels = {label for (_name, pairs) in samples for label in pairs}
    assert {key for key, _ in labels} <= {"limit", "workflow", "status", "le"}
    assert not any("customer" in str(v) or first.id in str(v) for _, v in labels)


async def test_a_refused_start_and_a_cancelled_run_are_counted_without_their_key(duro_env):
    scrape(duro_env.engine)
    run = await duro_env.start(turn, {"tenant": "acme-secret"})
    with pytest.raises(ConcurrencyLimitError):
        await duro_env.start(turn, {"tenant": "acme-secret"})
    await run.cancel()
    await duro_env.run_until_idle()
    samples = scrape(duro_env.engine)
    assert value(samples, "duro_quota_refused_total", workflow=turn.name) == 1
    assert value(samples, "duro_runs_started_total", workflow=turn.name) == 1
    assert value(samples, "duro_runs_finished_total", workflow=turn.name, status="cancelled") == 1
    text = generate_latest(_registry(duro_env.engine)).decode()
    assert "acme-secret" not in text and run.id not in text


def _registry(engine) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(collector(engine))
    return registry


async def test_one_meter_outlives_the_engines_it_is_attached_to(duro_env):
    meter = Meter()
    detach = meter.attach(duro_env.engine)
    run = await duro_env.start(turn, {"tenant": "a"})
    await run.signal("done")
    await duro_env.run_until_idle()
    detach()
    await duro_env.start(turn, {"tenant": "b"})
    registry = CollectorRegistry()
    registry.register(collector(lambda: duro_env.engine, meter=meter))
    assert registry.get_sample_value("duro_runs_started_total", {"workflow": turn.name}) == 1
    assert registry.get_sample_value("duro_limit_capacity", {"limit": "voice-calls"}) == 1


async def test_limits_and_quotas_log_one_line_each_naming_the_limit_or_workflow(duro_env, caplog):
    caplog.set_level(logging.INFO, logger="duro")
    first = await duro_env.start(call, {"n": 1, "keep": True})
    late = await duro_env.start(call, {"n": 2, "timeout": "5m"})
    await duro_env.run_until_idle()
    await duro_env.advance("50m")
    await duro_env.start(turn, {"tenant": "acme-secret"})
    with pytest.raises(ConcurrencyLimitError):
        await duro_env.start(turn, {"tenant": "acme-secret"})
    events = [(r.name, getattr(r, "event", None)) for r in caplog.records if getattr(r, "event", None)]
    assert ("duro.limits", "slot.granted") in events
    assert ("duro.limits", "slot.timed_out") in events
    assert ("duro.limits", "slot.expired") in events
    assert ("duro.quota", "quota.refused") in events
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "acme-secret" not in text and "customer" not in text and first.id not in text
    assert late.id not in text


def test_a_scrape_reads_the_store_once_whatever_the_limits_and_queues(tmp_path, monkeypatch):
    """One statement per scrape for the four gauge families (bench/scrape.py: 100 limits and
    100,000 waiting slots), and each limit's figures are its row's."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "bench"))
    import scrape  # bench/scrape.py: the same filling

    from duro import Engine, Limit, define_workspace

    workspace = define_workspace(
        limits={f"limit-{i:03d}": Limit(capacity=5, max_hold="1h") for i in range(100)}
    )
    engine = Engine(f"sqlite:///{tmp_path}/scrape.db", workspace)
    try:
        scrape.fill(engine, 100, 1_000)
        registry = CollectorRegistry()
        registry.register(collector(engine))
        generate_latest(registry)
        sent = []
        db = engine.store.db
        original = db._execute  # every statement of the store goes through it
        monkeypatch.setattr(db, "_execute", lambda *a: sent.append(a[1]) or original(*a))
        text = generate_latest(registry).decode()
        assert len(sent) == 1, sent
        assert 'duro_limit_waiting{limit="limit-007"} 10.0' in text
        assert 'duro_limit_busy{limit="limit-099"} 5.0' in text
    finally:
        engine.close()


async def test_the_counters_of_declared_limits_and_workflows_are_exported_at_0_from_the_first_scrape(
    duro_env,
):
    """``increase()`` needs a series before its first event: a series that appears with it counts 0."""
    duro_env.engine.register(turn)
    samples = scrape(duro_env.engine)
    for limit in ("voice-calls", "partner-api"):
        for name in (
            "duro_slot_expired_total",
            "duro_slot_timeouts_total",
            "duro_slot_reservations_lapsed_total",
            "duro_slot_wait_seconds_count",
            "duro_slot_hold_seconds_count",
        ):
            assert samples[(name, (("limit", limit),))] == 0, (name, limit)
    workflow = (("workflow", turn.name),)
    for name in ("duro_quota_refused_total", "duro_runs_started_total", "duro_run_duration_seconds_count"):
        assert samples[(name, workflow)] == 0, name
    for status in ("completed", "failed", "cancelled"):
        assert samples[("duro_runs_finished_total", (("status", status), *workflow))] == 0
