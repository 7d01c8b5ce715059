"""Scale-out on PostgreSQL: 1, 2 and 4 worker processes, duro against DBOS Transact, and
release-to-resume across two workers.

    .venv/bin/python bench/scale.py --json bench/results/scale.json      # about 5 minutes
    .venv/bin/python bench/scale.py --runs 500 --repeats 1 --workers 1,2 --no-dbos   # a smoke run

Workers are real processes on one PostgreSQL server (a fresh database per case): ``duro worker``
on a scratch project with a one-step workflow, or this script (``--dbos-worker``) running
``DBOS.launch()`` with a queue (``worker_concurrency`` 100, the poll interval as its polling
interval, the workflow and step as plain ``def``). Per system and worker count N, cases interleaved:

- backlog: the N warm workers are stopped (SIGSTOP), a client enqueues --runs runs (duro: a client
  ``Engine``'s ``start``; DBOS: ``DBOSClient.enqueue``), then SIGCONT at t0; rate = runs / (the last
  run's end in the database - t0): the workers and the server, without the client.
- live: the client starts --runs more runs one after another while the workers run; rate = runs /
  (the last end - the first start). The client's own start rate is reported beside it.

CPU ms per run of the workers and of the server come from /proc over each window.
Release-to-resume: a capacity-1 limit, worker A runs only ``ping``, worker B only ``pong``; after
the first hand-off every grant crosses processes; latency = the next acquire in the other process
- the release returning.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import _support as S
import psycopg

from duro import Engine, Limit, define_workspace
from duro.tooling import duration_ms

WORKFLOW, QUEUE = "one_step", "bench"
CONFIG_PY = """from duro import Limit, define_workspace

workspace = define_workspace(limits={"handoff": Limit(capacity=1, max_hold="1h")})
"""
ONE_STEP_PY = """from duro import step, workflow


@step
async def add_one(x: int) -> int:
    return x + 1


@workflow(name="one_step")
async def one_step(x: int) -> int:
    return await add_one(x)
"""
HANDOFF_PY = """import asyncio
import random
import time

from duro import acquire_slot, release_slot, wait_for_signal, workflow


@workflow(name="{name}")
async def {name}(inp: dict) -> list:
    marks = []
    for i in range(inp["n"]):
        slot = await acquire_slot("handoff", label="{name} " + str(i))
        marks.append(["acq", time.time_ns()])
        if i == 0 and inp["hold_first"]:
            await wait_for_signal("go")  # until the other run waits in the queue
        await asyncio.sleep(random.uniform(0, inp["hold_ms"]) / 1000)  # out of step with the pollers
        before = time.time_ns()
        assert (await release_slot(slot.id)).released
        marks.append(["rel", before, time.time_ns()])
    return marks
"""


def write_project(root: Path, files: dict[str, str]) -> Path:
    (root / "workflows").mkdir(parents=True)
    (root / "duro.config.py").write_text(CONFIG_PY)
    for name, text in files.items():
        (root / "workflows" / name).write_text(text)
    return root


def postmaster(pg: Any) -> int:
    return int((Path(pg.base) / "data" / "postmaster.pid").read_text().split()[0])


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def timed_batch(pg: Any, group: S.Procs, conn: Any, sql: str, runs: int, enqueue: Any, backlog: bool) -> dict:
    """One batch: enqueue ``runs`` (the workers stopped meanwhile for a backlog), wait for them all to
    end; the rate, the client's start rate and the CPU per run."""
    since = now_ms()
    if backlog:
        group.signal(signal.SIGSTOP)

    def cpu() -> tuple[float, float]:
        return sum(S.cpu_seconds(p) for p in group.pids), S.server_cpu_seconds(postmaster(pg))

    cpu0 = cpu()  # live: the window includes the starts
    begin = time.time()
    enqueue(runs)
    starts_s = time.time() - begin
    if backlog:
        cpu0 = cpu()  # backlog: the drain alone
    t0 = time.time() if backlog else begin
    if backlog:
        group.signal(signal.SIGCONT)

    def done() -> int | None:
        completed, failed, last = conn.execute(sql, (since,)).fetchone()
        if failed:
            raise RuntimeError(f"{failed} runs failed")
        return last if completed >= runs else None

    last = group.until(done, f"{runs} runs", max(120.0, runs / 20))
    workers, server = (end - start for end, start in zip(cpu(), cpu0, strict=True))
    return {
        "rate": runs / (last / 1000 - t0),
        "client_starts_per_s": runs / starts_s,
        "workers_cpu_ms_per_run": workers * 1000 / runs,
        "server_cpu_ms_per_run": server * 1000 / runs,
    }


DURO_DONE = (
    "SELECT count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status IN "
    "('failed', 'cancelled')), max(ended_at) FROM duro_runs WHERE created_at >= %s"
)
DBOS_DONE = (
    "SELECT count(*) FILTER (WHERE status = 'SUCCESS'), count(*) FILTER (WHERE status IN "
    "('ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')), max(completed_at) "
    f"FROM dbos.workflow_status WHERE queue_name = '{QUEUE}' AND created_at >= %s"
)


def duro_case(pg: Any, stores: S.Stores, n: int, args: argparse.Namespace) -> dict:
    with stores.database("postgresql") as db, S.scratch("scale") as tmp, S.procs(tmp) as group:
        client = Engine(db["url"])
        client.register_remote(WORKFLOW)
        loop = asyncio.new_event_loop()

        def enqueue(runs: int) -> None:
            async def go() -> None:
                for i in range(runs):
                    await client.start(WORKFLOW, i)

            loop.run_until_complete(go())

        try:
            enqueue(1)  # the schema, before any worker
            project = write_project(tmp / "project", {"bench.py": ONE_STEP_PY})
            for i in range(n):
                group.start(S.duro_worker(project, db["url"], f"w{i}", "--poll-interval", args.poll_interval))
            with psycopg.connect(db["dsn"], autocommit=True) as conn:
                registered = "SELECT count(*) = %s FROM duro_workers"
                group.until(lambda: conn.execute(registered, (n,)).fetchone()[0], "the workers", 120)
                timed_batch(pg, group, conn, DURO_DONE, args.warmup * n, enqueue, backlog=False)
                time.sleep(0.2)  # every worker's pass done before it is stopped
                return {
                    mode: timed_batch(pg, group, conn, DURO_DONE, args.runs, enqueue, mode == "backlog")
                    for mode in ("backlog", "live")
                }
        finally:
            client.close()
            loop.close()


def dbos_worker(spec: dict) -> None:
    """One DBOS worker process: launch, register the queue, run until SIGTERM."""
    import logging

    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.WARNING)

    @DBOS.step()
    def add_one(x: int) -> int:
        return x + 1

    @DBOS.workflow(name=WORKFLOW)
    def one_step(x: int) -> int:
        return add_one(x)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    config = {"name": "duro-scale", "system_database_url": spec["dsn"], "executor_id": spec["id"]}
    DBOS(config={**config, "application_version": "bench", "log_level": "WARNING"})  # type: ignore[typeddict-unknown-key]
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=100, polling_interval_sec=spec["poll_s"])
    Path(spec["ready"]).write_text("ready")
    stop.wait()
    DBOS.destroy()


def dbos_case(pg: Any, stores: S.Stores, n: int, args: argparse.Namespace) -> dict:
    from dbos import DBOSClient

    with stores.database("postgresql") as db, S.scratch("scale-dbos") as tmp, S.procs(tmp) as group:
        for i in range(n):  # the first one alone: it creates the schema and the queue
            spec = {"dsn": db["dsn"], "id": f"w{i}", "poll_s": args.poll_s, "ready": str(tmp / f"ready-{i}")}
            group.start([sys.executable, __file__, "--dbos-worker", json.dumps(spec)])
            group.until(lambda i=i: (tmp / f"ready-{i}").exists(), "a DBOS worker", 120)
        client = DBOSClient(system_database_url=db["dsn"])
        try:
            options = {"queue_name": QUEUE, "workflow_name": WORKFLOW}

            def enqueue(runs: int) -> None:
                for i in range(runs):
                    client.enqueue(options, i)  # type: ignore[arg-type]

            with psycopg.connect(db["dsn"], autocommit=True) as conn:
                timed_batch(pg, group, conn, DBOS_DONE, args.warmup * n, enqueue, backlog=False)
                time.sleep(0.2)
                return {
                    mode: timed_batch(pg, group, conn, DBOS_DONE, args.runs, enqueue, mode == "backlog")
                    for mode in ("backlog", "live")
                }
        finally:
            client.destroy()


async def latency_case(stores: S.Stores, args: argparse.Namespace) -> dict:
    with stores.database("postgresql") as db, S.scratch("scale-latency") as tmp, S.procs(tmp) as group:
        spec = define_workspace(limits={"handoff": Limit(capacity=1, max_hold="1h")})
        client = Engine(db["url"], workspace=spec)
        try:
            for wf in ("ping", "pong"):
                client.register_remote(wf)
            await client.list_runs(limit=1)  # the schema, before the workers
            for wf in ("ping", "pong"):
                project = write_project(tmp / wf, {f"{wf}.py": HANDOFF_PY.format(name=wf)})
                group.start(S.duro_worker(project, db["url"], wf, "--poll-interval", args.poll_interval))

            async def counts(expected: tuple[int, int]) -> None:
                while True:
                    info = next(i for i in await client.limits.list() if i.name == "handoff")
                    if (info.busy, info.waiting) == expected:
                        return
                    group.check()
                    await asyncio.sleep(0.02)

            inp = {"n": args.handoffs // 2, "hold_ms": args.poll_s * 1000}
            ping = await client.start("ping", {**inp, "hold_first": True})
            await asyncio.wait_for(counts((1, 0)), 120)
            pong = await client.start("pong", {**inp, "hold_first": False})
            await asyncio.wait_for(counts((1, 1)), 120)
            await ping.signal("go")
            marks = [(m[1], m[0], who, m[-1]) for who, h in (("ping", ping), ("pong", pong))
                     for m in await h.result(timeout="600s")]  # fmt: skip
        finally:
            client.close()
    marks.sort()
    lat, last = [], None
    for t, kind, who, returned in marks:  # sorted by the release's call
        if kind == "acq" and last is not None and last[1] != who:
            lat.append((t - last[0]) / 1e6)  # from the release returning
        elif kind == "rel":
            last = (returned, who)
    return S.latency(lat)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="runs per timed batch (2000)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per case; medians (3)")
    parser.add_argument("--workers", default="1,2,4", help="worker counts (1,2,4)")
    parser.add_argument("--poll-interval", default="100ms", help="duro's and DBOS's poll interval (100ms)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed runs per worker (10)")
    parser.add_argument(
        "--handoffs", type=int, default=200, help="slot acquisitions per latency sample (200)"
    )
    parser.add_argument("--no-dbos", action="store_true", help="skip DBOS")
    parser.add_argument("--json", type=Path, help="write every sample and the medians here")
    parser.add_argument("--dbos-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.poll_s = duration_ms(args.poll_interval) / 1000
    if args.dbos_worker:
        dbos_worker(json.loads(args.dbos_worker))
        return 0
    dbos = not args.no_dbos and S.dbos_installed()
    if not args.no_dbos and not dbos:
        S.log(S.MISSING_DBOS)
    pg = S.start_postgres()
    if pg is None:
        return 1
    stores = S.Stores(pg)
    cases = [(system, int(n)) for n in args.workers.split(",") for system in ("duro", "dbos")[: 1 + dbos]]
    cases.append(("latency", 0))

    def sample(case: tuple[str, int], _rnd: int) -> dict:
        system, n = case
        if system == "latency":
            return asyncio.run(latency_case(stores, args))
        return (duro_case if system == "duro" else dbos_case)(pg, stores, n, args)

    try:
        env = S.environment(pg) | {"dbos": S.version("dbos"), "params": vars(args)}
        got = S.interleave(cases, args.repeats, sample)
    finally:
        pg.destroy()
    med = {
        f"{system}/{mode}/{n}": {
            k: S.median(s[mode][k] for s in got[(system, n)]) for k in got[(system, n)][0][mode]
        }
        for system, n in cases[:-1]
        for mode in ("backlog", "live")
    }
    rows = []
    for key, m in med.items():
        system, mode, n = key.split("/")
        other = med.get(f"dbos/{mode}/{n}") if system == "duro" else None
        vs = f"{m['rate'] / other['rate']:.2f}x" if other else "-"
        cpu = f"{m['workers_cpu_ms_per_run']:.2f} + {m['server_cpu_ms_per_run']:.2f}"
        rows.append((system, mode, int(n), m["rate"], m["client_starts_per_s"], cpu, vs))
    print(S.table(("system", "mode", "N", "runs/s", "client starts/s", "cpu ms/run", "vs DBOS"), rows))
    lat = {k: S.median(s[k] for s in got[("latency", 0)]) for k in ("median_ms", "p99_ms")}
    print(f"\nrelease-to-resume across workers: median {lat['median_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms")
    S.write_json(
        args.json,
        {**env, "medians": med, "latency": lat, "samples": {f"{s}/{n}": v for (s, n), v in got.items()}},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
