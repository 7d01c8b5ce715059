"""Rates in the harness: at most ``limit`` granted in any window of ``per``, a durable FIFO queue per
(rate, key), grants at the earliest instant the window allows, timeouts, restarts without a burst,
keyed costs, and a grant recorded so that a replay takes nothing again."""

from __future__ import annotations

import logging

import pytest

from duro import (
    ConfigError,
    DuroError,
    Rate,
    RateLimited,
    RateTimeoutError,
    RunCancelled,
    RunFailedError,
    acquire_rate,
    define_workspace,
    step,
    wait_for_signal,
    workflow,
)

RATES = {
    "partner-api": {"limit": 3, "per": "1m"},
    "llm-tokens": {"limit": 10, "per": "1m", "per_key": True},
}
pytestmark = pytest.mark.duro(config={"rates": RATES})
CALLS: list[str] = []


@step
async def call_partner(job: str) -> str:
    CALLS.append(job)
    return job


@workflow(name="rates.caller")
async def caller(job: str) -> str:
    grant = await acquire_rate("partner-api", timeout="1h")
    await call_partner(job)
    return f"{grant.granted_at:%H:%M:%S} waited {grant.waited_ms}"


@workflow(name="rates.patient")
async def patient(timeout: str) -> str:
    try:
        await acquire_rate("partner-api", timeout=timeout)
    except RateTimeoutError as err:
        return f"timed out: {err.rate}"
    return "granted"


@workflow(name="rates.tokens")
async def tokens(job: dict) -> str:
    grant = await acquire_rate("llm-tokens", key=f"tenant:{job['tenant']}", cost=job["cost"])
    return f"{grant.key} {grant.granted_at:%H:%M:%S}"


@workflow(name="rates.granted_then_waits")
async def granted_then_waits(job: str) -> str:
    grant = await acquire_rate("partner-api")
    await wait_for_signal("go")
    return f"{grant.granted_at:%H:%M:%S}"


ATTEMPTS: list[str] = []
REFUSALS: list[str] = []  # what the downstream answers next: "429" (limited) or "500" (an error)


@step(retries=2, retry_delay="1s", rate="partner-api")
async def fetch(page: int) -> int:
    ATTEMPTS.append(f"page{page}")
    answer = REFUSALS.pop(0) if REFUSALS else "200"
    if answer == "429":
        raise RateLimited("partner-api", retry_after="30s")
    if answer == "500":
        raise RuntimeError("the partner API failed")
    return page


@workflow(name="rates.pages")
async def pages(count: int) -> list[int]:
    return [await fetch(n) for n in range(count)]


@workflow(name="rates.cancellable")
async def cancellable(job: str) -> str:
    try:
        await acquire_rate("partner-api")
    except RunCancelled:
        CALLS.append(f"{job} cancelled")
        raise
    return "granted"


@workflow(name="rates.bad")
async def bad(args: dict) -> str:
    await acquire_rate(args["rate"], **args.get("kwargs", {}))
    return "granted"


async def test_seven_starts_on_three_a_minute_are_granted_three_three_and_one_in_order(duro_env):
    CALLS.clear()
    runs = [await duro_env.start(caller, f"job{n}", run_id=f"r{n}") for n in range(7)]
    await duro_env.run_until_idle()
    assert CALLS == ["job0", "job1", "job2"]
    await duro_env.assert_rate("partner-api", waiting=4)
    await duro_env.advance("59s")
    assert CALLS == ["job0", "job1", "job2"]  # not a moment early
    await duro_env.advance("1s")
    assert CALLS == [f"job{n}" for n in range(6)]
    await duro_env.advance("1m")
    assert CALLS == [f"job{n}" for n in range(7)]
    results = [await run.result() for run in runs]
    assert [r.split()[0] for r in results] == ["00:00:00"] * 3 + ["00:01:00"] * 3 + ["00:02:00"]
    assert results[6].endswith("waited 120000")
    await duro_env.assert_rate("partner-api", waiting=0)
    steps = await runs[3].steps()
    assert [(s.name, s.status) for s in steps][:1] == [("rate · partner-api", "completed")]


async def test_a_wait_past_its_timeout_raises_and_leaves_the_queue(duro_env):
    CALLS.clear()
    for n in range(3):
        await duro_env.start(caller, f"job{n}")
    late = await duro_env.start(patient, "10s")
    after = await duro_env.start(caller, "after")
    await duro_env.run_until_idle()
    await duro_env.assert_rate("partner-api", waiting=2)
    await duro_env.advance("10s")
    assert await late.result() == "timed out: partner-api"
    await duro_env.assert_rate("partner-api", waiting=1)
    await duro_env.advance("50s")
    assert (await after.result()).startswith("00:01:00")
    (hook,) = [s for s in await late.steps() if s.name == "rate · partner-api"]
    assert hook.status == "failed"


async def test_a_restart_keeps_the_queue_and_grants_no_burst(duro_env):
    CALLS.clear()
    runs = [await duro_env.start(caller, f"job{n}") for n in range(5)]
    await duro_env.run_until_idle()
    assert len(CALLS) == 3
    await duro_env.restart(down_for="30s")
    await duro_env.run_until_idle()
    assert len(CALLS) == 3  # the window still holds three grants: nothing more before t0+60 s
    await duro_env.advance("30s")
    assert CALLS == [f"job{n}" for n in range(5)]
    assert [(await r.result()).split()[0] for r in runs] == ["00:00:00"] * 3 + ["00:01:00"] * 2


async def test_keyed_costs_have_a_window_per_key_and_a_later_waiter_never_passes(duro_env):
    a1 = await duro_env.start(tokens, {"tenant": "a", "cost": 8})
    a2 = await duro_env.start(tokens, {"tenant": "a", "cost": 5})
    a3 = await duro_env.start(tokens, {"tenant": "a", "cost": 1})  # 1 would fit: FIFO holds it
    b1 = await duro_env.start(tokens, {"tenant": "b", "cost": 10})
    await duro_env.run_until_idle()
    assert await a1.result() == "tenant:a 00:00:00"
    assert await b1.result() == "tenant:b 00:00:00"
    await duro_env.assert_rate("llm-tokens", waiting=2, key="tenant:a")
    await duro_env.assert_rate("llm-tokens", waiting=0, key="tenant:b")
    await duro_env.advance("1m")
    assert [await r.result() for r in (a2, a3)] == ["tenant:a 00:01:00"] * 2


async def test_a_replayed_grant_takes_nothing_again(duro_env):
    CALLS.clear()
    run = await duro_env.start(granted_then_waits, "once")
    await duro_env.run_until_idle()
    await duro_env.restart()  # the run is replayed: its grant is read back, not taken again
    await run.signal("go")
    assert await run.result() == "00:00:00"
    await duro_env.assert_rate("partner-api", waiting=0, granted=1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"rate": "nope"}, "unknown rate 'nope'"),
        ({"rate": "partner-api", "kwargs": {"key": "x"}}, "rate 'partner-api' has no keys"),
        ({"rate": "llm-tokens"}, "rate 'llm-tokens' is keyed"),
        (
            {"rate": "partner-api", "kwargs": {"cost": 4}},
            "cost must be an integer from 1 to the rate's limit (3)",
        ),
    ],
)
async def test_bad_calls_fail_the_run_with_a_clear_error(duro_env, args, message):
    run = await duro_env.start(bad, args)
    await duro_env.run_until_idle()
    with pytest.raises(RunFailedError) as failed:
        await run.result()
    assert isinstance(failed.value.cause, DuroError)
    assert message in str(failed.value.cause)
    await duro_env.assert_rate("partner-api", waiting=0, granted=0)


def test_a_rate_is_checked_when_the_config_loads():
    with pytest.raises(ConfigError, match="rate 'r': limit must be an integer from 1 to 1,000,000"):
        define_workspace(rates={"r": Rate(limit=0, per="1m")})
    with pytest.raises(ConfigError, match="rate 'r': per must be from '1s' to '1d'"):
        define_workspace(rates={"r": Rate(limit=1, per="2d")})
    with pytest.raises(ConfigError, match="rate 'r': unknown field"):
        define_workspace(rates={"r": {"limit": 1, "per": "1m", "burst": 3}})
    assert define_workspace(rates={"r": Rate(limit=5, per="2s")}).rates["r"].per_ms == 2000


async def test_each_attempt_of_a_rated_step_takes_a_grant(duro_env):
    ATTEMPTS.clear()
    REFUSALS[:] = ["500", "500"]  # page 0 fails twice, then succeeds on its third attempt
    run = await duro_env.start(pages, 2)
    await duro_env.run_until_idle()
    await duro_env.advance("3s")  # the retries' delays: 1 s, then 2 s
    assert ATTEMPTS == ["page0", "page0", "page0"]  # three grants taken: the rate is spent
    await duro_env.assert_rate("partner-api", granted=3, waiting=1)
    await duro_env.advance("57s")  # page 1 waits for the first grant to leave the window
    assert await run.result() == [0, 1]
    assert ATTEMPTS == ["page0", "page0", "page0", "page1"]
    (first, second) = await run.steps()
    assert (first.name, first.status, second.status) == ("fetch", "completed", "completed")


async def test_a_429_pauses_the_rate_for_everyone_and_spends_no_retry(duro_env):
    ATTEMPTS.clear()
    CALLS.clear()
    REFUSALS[:] = ["429"]
    limited = await duro_env.start(pages, 1)
    await duro_env.run_until_idle()
    await duro_env.assert_rate("partner-api", paused=True, granted=1)
    other = await duro_env.start(caller, "other")  # another workflow's grant waits for the pause
    await duro_env.run_until_idle()
    assert CALLS == []
    await duro_env.assert_rate("partner-api", waiting=1)
    await duro_env.advance("29s")
    assert CALLS == [] and ATTEMPTS == ["page0"]
    await duro_env.advance("1s")  # the pause is over: both are granted, in the order they asked
    assert await limited.result() == [0]
    assert (await other.result()).startswith("00:00:30")
    assert ATTEMPTS == ["page0", "page0"]
    (fetched,) = await limited.steps()
    assert fetched.status == "completed"
    await duro_env.assert_rate("partner-api", paused=False)


async def test_three_429s_in_a_row_spend_none_of_the_two_retries(duro_env):
    ATTEMPTS.clear()
    REFUSALS[:] = ["429", "429", "429"]
    run = await duro_env.start(pages, 1)
    for _ in range(3):
        await duro_env.run_until_idle()
        await duro_env.advance("30s")
        await duro_env.advance("1m")  # the grants of the retries leave the window
    assert await run.result() == [0]
    assert len(ATTEMPTS) == 4


async def test_operators_override_pause_and_resume_a_rate(duro_env):
    CALLS.clear()
    runs = [await duro_env.start(caller, f"job{n}") for n in range(5)]
    await duro_env.run_until_idle()
    assert len(CALLS) == 3
    rates = duro_env.engine.rates
    info = await rates.set_limit("partner-api", 4)
    assert (info.limit, info.effective_limit, info.limit_override) == (3, 4, 4)
    await duro_env.run_until_idle()
    assert len(CALLS) == 4  # a raised limit grants at once
    paused = await rates.pause("partner-api", "5m")
    assert paused.paused_until is not None
    await duro_env.advance("2m")
    assert len(CALLS) == 4  # the window allows it, the pause does not
    waiters = await rates.waiters("partner-api")
    assert [(w.position, w.cost) for w in waiters] == [(1, 1)]
    await rates.resume("partner-api")
    await duro_env.run_until_idle()
    assert len(CALLS) == 5
    assert (await runs[4].result()).startswith("00:02:00")
    info = await rates.set_limit("partner-api", None)
    assert (info.effective_limit, info.limit_override) == (3, None)
    (listed,) = [i for i in await rates.list() if i.name == "partner-api"]
    assert (listed.per, listed.per_key, listed.waiting) == ("1m", False, 0)


async def test_a_cancelled_waiter_leaves_the_queue_and_the_next_goes_in_its_place(duro_env):
    CALLS.clear()
    for n in range(3):
        await duro_env.start(caller, f"job{n}")
    gone = await duro_env.start(cancellable, "gone")
    after = await duro_env.start(caller, "after")
    await duro_env.run_until_idle()
    await duro_env.assert_rate("partner-api", waiting=2)
    await gone.cancel()
    await duro_env.run_until_idle()
    assert await gone.status() == "cancelled"
    await duro_env.assert_rate("partner-api", waiting=1)
    await duro_env.advance("1m")
    assert (await after.result()).startswith("00:01:00")
    (hook,) = [s for s in await gone.steps() if s.name == "rate · partner-api"]
    assert hook.status == "cancelled"


async def test_operator_calls_refuse_unknown_rates_and_bad_values(duro_env):
    rates = duro_env.engine.rates
    with pytest.raises(DuroError, match="unknown rate 'nope'"):
        await rates.pause("nope", "1m")
    with pytest.raises(ConfigError, match="rate 'partner-api': limit must be an integer"):
        await rates.set_limit("partner-api", 0)
    with pytest.raises(DuroError, match="rate 'partner-api' has no keys"):
        await rates.waiters("partner-api", key="x")
    await duro_env.assert_rate("partner-api", paused=False, waiting=0)


async def test_metrics_and_log_lines_name_the_rate_never_a_key(duro_env, caplog):
    from prometheus_client import CollectorRegistry

    from duro.metrics import collector

    registry = CollectorRegistry()
    registry.register(collector(duro_env.engine))

    def sample(name: str) -> float | None:
        return registry.get_sample_value(name, {"rate": "partner-api"})

    assert (sample("duro_rate_granted_total"), sample("duro_rate_limit")) == (
        0,
        3,
    )  # at 0 from the first scrape
    caplog.set_level(logging.INFO, logger="duro.rates")
    ATTEMPTS.clear()
    REFUSALS[:] = ["429"]
    await duro_env.start(tokens, {"tenant": "secret-tenant", "cost": 1})
    limited = await duro_env.start(pages, 1)
    await duro_env.run_until_idle()
    late = await duro_env.start(patient, "10s")
    waits = await duro_env.start(caller, "waits")  # 30 s, for the pause
    await duro_env.run_until_idle()
    assert (sample("duro_rate_paused"), sample("duro_rate_waiting")) == (1, 2)
    await duro_env.advance("10s")
    assert await late.result() == "timed out: partner-api"
    assert sample("duro_rate_timeouts_total") == 1
    await duro_env.advance("20s")
    assert await limited.result() == [0]
    assert (await waits.result()).startswith("00:00:30 waited 30000")
    assert sample("duro_rate_granted_total") == 3  # fetch's two attempts, and the caller's
    assert sample("duro_rate_wait_seconds_count") == 3
    assert sample("duro_rate_wait_seconds_sum") == 30
    assert sample("duro_rate_paused") == 0
    lines = [(r.getMessage(), getattr(r, "event", None)) for r in caplog.records if r.name == "duro.rates"]
    assert ("rate partner-api paused for 30000 ms by a step", "rate.paused") in lines
    assert ("a wait for rate partner-api timed out in the queue", "rate.timed_out") in lines
    assert not any("secret-tenant" in text for text, _ in lines)
    assert registry.get_sample_value("duro_rate_granted_total", {"rate": "llm-tokens"}) == 1
