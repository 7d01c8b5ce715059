"""Rates for operators: ``engine.rates``."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from .._clock import Clock
from .._durations import Duration, format_ms, to_ms
from .._events import log_rate
from ..definitions._config import RateConfig, Workspace, check_rate
from ..store import RateWaitRow
from ..store._rates import RateState
from ..worker._gateway import StoreGateway, store_trouble
from ._acquire import LocalRates
from ._types import RateInfo, RateWaiter, aware, check_rate_key, rate_config

MAX_WAITERS = 1000


class Rates:
    """``engine.rates``: list the rates, their waiters, override a limit, pause and resume."""

    def __init__(
        self,
        *,
        workspace: Workspace,
        gateway: StoreGateway,
        clock: Clock,
        local: Callable[[], LocalRates | None],
    ) -> None:
        self._workspace = workspace
        self._gateway = gateway
        self._clock = clock
        self._local = local

    def _notify(self, rows: builtins.list[RateWaitRow]) -> None:
        local = self._local()
        if local is not None:
            local.notify(rows)

    async def leave_queues(self, run_ids: builtins.list[str], now: int | None = None) -> None:
        """Runs that ended (at ``now``) leave the rates' queues they wait in; the queues behind
        them are decided again."""
        if not run_ids or not self._workspace.rates:
            return
        try:
            granted = await self._gateway.call(
                self._gateway.store.rates.leave,
                self._workspace.rates,
                run_ids,
                self._clock.now_ms() if now is None else now,
            )
        except Exception as err:  # noqa: BLE001 - the store out of reach: the waiter times out in the end
            store_trouble("taking an ended run out of the rates' queues", err)
            return
        self._notify(granted)

    async def _known(self) -> tuple[int, dict[str, RateState], dict[str, RateConfig]]:
        """In one read: the instant, the store's rates, and every rate this engine knows (its
        workspace's, and those the store knows as the last engine to start with them declared them)."""
        now = self._clock.now_ms()
        states = {s.name: s for s in await self._gateway.call(self._gateway.store.rates.states, now)}
        return now, states, {**_declared(builtins.list(states.values())), **self._workspace.rates}

    async def _config(self, name: Any) -> RateConfig:
        """The rate ``name`` as this engine's workspace declares it, else as the store knows it (a
        client engine without the project), else a clear error listing both."""
        if isinstance(name, str) and name in self._workspace.rates:
            return self._workspace.rates[name]
        return self._pick((await self._known())[2], name)

    def _pick(self, configs: dict[str, RateConfig], name: Any) -> RateConfig:
        """The rate ``name`` among ``configs``, or the clear error :func:`rate_config` gives."""
        return rate_config(replace(self._workspace, rates=configs), name)

    async def list(self) -> builtins.list[RateInfo]:
        """Every rate declared in this engine's workspace, and every other rate the store knows (as
        the last engine to start with it declared it): limits, the costs granted in the current
        window, waiters and a pause of the whole rate."""
        now, states, configs = await self._known()
        return [_info(configs[name], states.get(name), now) for name in sorted(configs)]

    async def info(self, name: str) -> RateInfo:
        """One rate, as :meth:`list` shows it."""
        now, states, configs = await self._known()
        config = self._pick(configs, name)
        return _info(config, states.get(config.name), now)

    async def key_use(self, name: str, key: str) -> tuple[int, int, datetime | None]:
        """One key of a keyed rate: the costs granted in its current window, its waiters, and its
        own pause (an aware datetime, or ``None``)."""
        config = await self._config(name)
        checked = check_rate_key(config, key) or ""
        now = self._clock.now_ms()
        granted, waiting, paused = await self._gateway.call(
            self._gateway.store.rates.key_state, config.name, checked, config.per_ms, now
        )
        return granted, waiting, None if paused is None or paused <= now else aware(paused)

    async def waiters(self, name: str, key: str | None = None) -> builtins.list[RateWaiter]:
        """The rate's waiters (of ``key`` only, when given), by key then in queue order (at most
        1,000): each with its place in its key's queue."""
        config = await self._config(name)
        checked = None if key is None else check_rate_key(config, key)
        rows = await self._gateway.call(self._gateway.store.rates.waiters, config.name, checked, MAX_WAITERS)
        places: dict[str, int] = {}
        out = []
        for row in rows:
            places[row.key] = places.get(row.key, 0) + 1
            out.append(
                RateWaiter(
                    row.run_id,
                    row.key or None,
                    places[row.key],
                    row.cost,
                    aware(row.enqueued_at),
                    None if row.timeout_at is None else aware(row.timeout_at),
                )
            )
        return out

    async def set_limit(self, name: str, limit: int | None) -> RateInfo:
        """Override the rate's limit (``None``: back to the declared one); it survives restarts. A
        raised limit grants the waiters it now allows at once."""
        config = await self._config(name)
        if limit is not None:
            check_rate(config.name, limit, config.per_ms)  # the same bounds as the declaration
        await self._gateway.call(self._gateway.store.rates.set_limit, config, limit, self._clock.now_ms())
        self._look_again()
        return await self.info(config.name)

    async def pause(self, name: str, duration: Duration, key: str | None = None) -> RateInfo:
        """Make no grant of the rate (of ``key`` only, when given) until ``duration`` has passed,
        in every process; waiters keep their places."""
        config = await self._config(name)
        checked = None if key is None else check_rate_key(config, key)
        ms = to_ms(duration, f"pause of rate {config.name!r}")
        now = self._clock.now_ms()
        await self._gateway.call(self._gateway.store.rates.pause, config.name, checked, now + ms, now)
        log_rate("rate.paused", config.name, ms, "an operator")
        self._look_again()
        return await self.info(config.name)

    async def resume(self, name: str, key: str | None = None) -> RateInfo:
        """End a pause of the rate (of ``key`` only, when given) now: its waiters are granted as
        the window allows."""
        config = await self._config(name)
        checked = None if key is None else check_rate_key(config, key)
        now = self._clock.now_ms()
        await self._gateway.call(self._gateway.store.rates.pause, config.name, checked, None, now)
        log_rate("rate.resumed", config.name)
        self._look_again()
        return await self.info(config.name)

    def _look_again(self) -> None:
        local = self._local()
        if local is not None:
            local.look_again()


def _declared(states: builtins.list[RateState]) -> dict[str, RateConfig]:
    """The rates the store knows as declared by the last engine to start with them."""
    return {
        s.name: RateConfig(s.name, s.limit, s.per_ms, s.per_key)
        for s in states
        if s.limit is not None and s.per_ms is not None
    }


def _info(config: RateConfig, state: RateState | None, now: int) -> RateInfo:
    override = None if state is None else state.limit_override
    paused = None if state is None else state.paused_until
    return RateInfo(
        name=config.name,
        limit=config.limit,
        effective_limit=override or config.limit,
        per=format_ms(config.per_ms),
        limit_override=override,
        per_key=config.per_key,
        granted=0 if state is None else state.granted,
        waiting=0 if state is None else state.waiting,
        paused_until=None if paused is None or paused <= now else aware(paused),
    )
