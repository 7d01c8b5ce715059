"""Start-up: how long ``import duro``, ``duro --help``, ``duro limits list`` against a live dev server,
``duro dev`` to its first answer and the pytest plugin take, each beside a baseline measured in the
same run, on the checkout and (``--base REV``) on another commit, interleaved.

    .venv/bin/python bench/startup.py                      # the checkout alone, 7 rounds
    .venv/bin/python bench/startup.py --base 0194a9d       # and the commit before, interleaved
    .venv/bin/python bench/startup.py --base 0194a9d --rounds 11 --json /tmp/startup.json

Every sample is a fresh interpreter (``.venv/bin/python``, bytecode cache warm: one unmeasured
round first) with one tree's ``sdk``, ``devserver`` and ``harness`` first on ``PYTHONPATH``; the
figure is its wall time, interpreter start included. ``--base`` is exported with ``git archive``.

- ``import duro``: ``python -c "import duro"``; baseline ``python -c "import pydantic"``.
- ``duro --help``: the console script's own code (``from duro_devserver.cli import main; main()``)
  with ``--help``; baseline ``import pydantic``.
- ``duro limits list``: the same against a dev server of this tree started once for the run
  (``--agent``); baseline ``import pydantic``.
- ``duro dev`` to first answer: from the process's start to the first 200 of ``/api/health`` (polled
  every 5 ms) on a one-workflow project; baseline ``import pydantic``.
- the pytest plugin: a one-test run (``pytest -q test_one.py``) with only duro's plugin loaded
  (``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 -p duro_harness.plugin``) against the same run without it: the
  plugin's own cost, without the other plugins this environment has. And the run as a user's would
  be in this environment (every installed plugin) against the same with ``-p no:duro``.

Within a round each case runs once per tree and baseline; the order of trees alternates by round.
The table gives medians (ms) and each case's ratio to its baseline; with ``--base``, also base / head
(above 1: the checkout starts faster).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from _support import export_tree

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
TREE_DIRS = ("sdk", "devserver", "harness", "templates")

CONFIG = "from duro import Limit, define_workspace\n\nworkspace = define_workspace(limits={'api': Limit(2, '1h')})\n"
WORKFLOW = """from duro import step, workflow


@step
async def greet(name: str) -> str:
    return f"hello {name}"


@workflow
async def hello(name: str) -> str:
    return await greet(name)
"""
ONE_TEST = "def test_one():\n    assert 1 + 1 == 2\n"
HELP = "import sys; from duro_devserver.cli import main; sys.argv[0] = 'duro'; main()"


def tree_env(tree: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(str(tree / d) for d in ("sdk", "devserver", "harness"))
    env.update(extra)
    return env


def timed(args: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return elapsed


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def health(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=1) as answer:
            return answer.status == 200
    except OSError:
        return False


def dev_server(tree: Path, project: Path, port: int) -> tuple[subprocess.Popen[bytes], float]:
    """``duro dev PROJECT`` of ``tree`` on ``port``, and the ms from its start to its first answer."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [PYTHON, "-m", "duro_devserver", "dev", str(project), "--port", str(port)],
        env=tree_env(tree),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = started + 60
    while not health(port):
        if process.poll() is not None or time.perf_counter() > deadline:
            process.kill()
            raise SystemExit(f"duro dev of {tree} did not answer (exit {process.poll()})")
        time.sleep(0.005)
    return process, (time.perf_counter() - started) * 1000


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def make_project(where: Path) -> Path:
    (where / "workflows").mkdir(parents=True)
    (where / "duro.config.py").write_text(CONFIG)
    (where / "workflows" / "hello.py").write_text(WORKFLOW)
    return where


def sample(tree: Path, work: Path, server_port: int) -> dict[str, float]:
    """One of each measurement on ``tree``."""
    env = tree_env(tree)
    bare = tree_env(tree, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    pytest = [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_one.py"]
    process, first_answer = dev_server(tree, make_project(Path(tempfile.mkdtemp(dir=work))), free_port())
    stop(process)
    return {
        "import duro": timed([PYTHON, "-c", "import duro"], env),
        "duro --help": timed([PYTHON, "-c", HELP, "--help"], env),
        "duro limits list": timed(
            [PYTHON, "-c", HELP, "limits", "list", "--agent", f"http://127.0.0.1:{server_port}"], env
        ),
        "duro dev to first answer": first_answer,
        "pytest, duro's plugin alone": timed([*pytest, "-p", "duro_harness.plugin"], bare, cwd=work),
        "pytest, no plugin": timed(pytest, bare, cwd=work),
        "pytest, every plugin": timed(pytest, env, cwd=work),
        "pytest, every plugin but duro's": timed([*pytest, "-p", "no:duro"], env, cwd=work),
    }


BASELINES = {
    "import duro": "import pydantic",
    "duro --help": "import pydantic",
    "duro limits list": "import pydantic",
    "duro dev to first answer": "import pydantic",
    "pytest, duro's plugin alone": "pytest, no plugin",
    "pytest, every plugin": "pytest, every plugin but duro's",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help="a commit to compare the checkout with")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path, help="write every sample here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="duro-startup-") as tmp:
        work = Path(tmp)
        (work / "test_one.py").write_text(ONE_TEST)
        trees = {"head": ROOT}
        if args.base:
            trees["base"] = work / "base"
            trees["base"].mkdir()
            export_tree(args.base, list(TREE_DIRS), trees["base"])
        servers = {}
        for name, tree in trees.items():
            port = free_port()
            servers[name] = (dev_server(tree, make_project(work / f"served-{name}"), port)[0], port)
        samples: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
        pydantic: list[float] = []
        try:
            for rnd in range(args.rounds + 1):  # round 0 warms the bytecode caches, unmeasured
                order = list(trees) if rnd % 2 else list(reversed(trees))
                base_ms = timed([PYTHON, "-c", "import pydantic"], tree_env(ROOT))
                for name in order:
                    figures = sample(trees[name], work, servers[name][1])
                    if rnd:
                        for case, ms in figures.items():
                            samples[name].setdefault(case, []).append(ms)
                if rnd:
                    pydantic.append(base_ms)
                print(f"round {rnd}/{args.rounds}", file=sys.stderr)
        finally:
            for process, _ in servers.values():
                stop(process)

    medians = {
        name: {case: statistics.median(v) for case, v in cases.items()} for name, cases in samples.items()
    }
    for cases in medians.values():
        cases["import pydantic"] = statistics.median(pydantic)
    header = "| what | head (ms) | baseline | head / baseline |"
    rule = "| --- | ---: | --- | ---: |"
    if "base" in medians:
        header = (
            "| what | base (ms) | head (ms) | baseline | base / baseline | head / baseline | base / head |"
        )
        rule = "| --- | ---: | ---: | --- | ---: | ---: | ---: |"
    print(header)
    print(rule)
    for case, baseline in BASELINES.items():
        head = medians["head"][case]
        line = f"| {case} |"
        if "base" in medians:
            base = medians["base"][case]
            line += f" {base:,.0f} | {head:,.0f} | {baseline} ({medians['head'][baseline]:,.0f} ms) |"
            line += f" {base / medians['base'][baseline]:.2f}x | {head / medians['head'][baseline]:.2f}x |"
            line += f" {base / head:.2f} |"
        else:
            line += f" {head:,.0f} | {baseline} ({medians['head'][baseline]:,.0f} ms) |"
            line += f" {head / medians['head'][baseline]:.2f}x |"
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"samples": samples, "import pydantic": pydantic}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
