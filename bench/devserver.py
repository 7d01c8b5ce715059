"""Dev-loop benchmark: how long a saved change takes to be live in a running ``duro dev``, and how
fast the HTTP API starts runs, against the same starts made in-process in the same run.

    .venv/bin/python bench/devserver.py                  # defaults: --reloads 15 --starts 300
    .venv/bin/python bench/devserver.py --json bench/results/devserver.json

Reload latency: the workflow file is rewritten (its output changes), then a start is retried until
a run answers with the new output; the time from the write to that answer is one sample (it
includes watchfiles noticing the change, the re-import, the engine swap and one run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import httpx
from _support import scratch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from duro import Engine  # noqa: E402
from tests.support.devserver import running_dev_server  # noqa: E402

PROJECT = Path(__file__).resolve().parent.parent / "tests" / "e2e" / "project"


def wall() -> float:
    return time.perf_counter()


def output_of(client: httpx.Client, run_id: str) -> str | None:
    while True:
        run = client.get(f"/api/runs/{run_id}").json()["run"]
        if run["status"] in ("completed", "failed"):
            return run["output"]


def reload_samples(client: httpx.Client, source: Path, count: int) -> list[float]:
    samples = []
    text = source.read_text()
    for index in range(count):
        word = f"v{index}"
        began = wall()
        source.write_text(text.replace('f"hello {name}"', f'f"{word} {{name}}"'))
        while True:
            run_id = client.post("/api/workflows/greet/runs", json={"input": {"name": "x"}}).json()["run"][
                "id"
            ]
            if output_of(client, run_id) == f"{word} x":
                break
        samples.append(wall() - began)
    return samples


def http_starts(client: httpx.Client, count: int) -> float:
    began = wall()
    for index in range(count):
        answer = client.post("/api/workflows/greet/runs", json={"input": {"name": f"n{index}"}})
        assert answer.status_code == 201, answer.text
    return count / (wall() - began)


async def engine_starts(project: Path, count: int) -> float:
    engine = Engine.from_project(project, database_url=f"sqlite:///{project / '.duro' / 'inproc.db'}")
    async with engine:
        began = wall()
        for index in range(count):
            await engine.start("greet", {"name": f"n{index}"})
        return count / (wall() - began)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reloads", type=int, default=15)
    parser.add_argument("--starts", type=int, default=300)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    with scratch("devserver") as tmp:
        project = tmp / "project"
        shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns(".duro", "__pycache__"))
        with running_dev_server(project) as server, server.client() as client:
            reloads = reload_samples(client, project / "workflows" / "jobs.py", args.reloads)
            http_rate = http_starts(client, args.starts)
        inproc_rate = asyncio.run(engine_starts(project, args.starts))
    result = {
        "reload_seconds": reloads,
        "median_reload_seconds": statistics.median(reloads),
        "max_reload_seconds": max(reloads),
        "http_starts_per_second": http_rate,
        "in_process_starts_per_second": inproc_rate,
    }
    print(
        f"save -> live: median {result['median_reload_seconds'] * 1000:.0f} ms, "
        f"max {result['max_reload_seconds'] * 1000:.0f} ms over {len(reloads)} saves"
    )
    print(
        f"starts over HTTP (one client, sequential): {http_rate:,.0f}/s; in-process engine.start: "
        f"{inproc_rate:,.0f}/s (HTTP at {http_rate / inproc_rate:.2f}x)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
