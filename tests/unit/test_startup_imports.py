"""Start-up stays light: ``import duro``, a project's workflow module, ``duro --help`` and a pytest run
that asks for no ``duro_env`` load no database driver, no SQLAlchemy, nothing of the dev server and
no metrics or tracing library. Each check runs in a fresh interpreter (this one has them all loaded).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HEAVY = ("sqlalchemy", "sqlmodel", "psycopg", "starlette", "uvicorn", "prometheus_client", "opentelemetry")


def _loaded_after(code: str, *, cwd: Path | None = None) -> list[str]:
    """The packages of HEAVY that a fresh interpreter has loaded after running ``code``."""
    script = code + textwrap.dedent(
        f"""
        import json as _json, sys as _sys
        print(_json.dumps(sorted({{name.partition(".")[0] for name in _sys.modules}} & {set(HEAVY)!r})))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=cwd, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_duro_loads_none_of_them():
    assert _loaded_after("import duro") == []


def test_a_workflow_module_decorating_its_code_loads_none_of_them():
    code = textwrap.dedent(
        """
        from pydantic import BaseModel

        from duro import (
            Concurrency, Limit, Workflow, define_workspace, sleep, step, wait_for_signal, with_limit,
            workflow,
        )

        workspace = define_workspace(limits={"partner-api": Limit(capacity=5, max_hold="1h")})


        class Order(BaseModel):
            tenant: str
            amount: int


        @step(retries=2, retry_delay="1s")
        async def charge(order: Order) -> int:
            return order.amount


        @workflow(concurrency=Concurrency(key=lambda order: f"tenant:{order.tenant}", limit=2))
        async def checkout(order: Order) -> int:
            async with with_limit("partner-api"):
                await sleep("1s")
                return await charge(order)


        @workflow
        class Nightly(Workflow):
            name = "nightly"
            concurrency = Concurrency(key=lambda inp: "nightly", limit=1)

            async def run(self, ctx, inp: None) -> None:
                await wait_for_signal("go", timeout="1d")
        """
    )
    assert _loaded_after(code) == []


@pytest.mark.parametrize(
    "args",
    [["--help"], ["limits", "--help"], ["runs", "--help"], ["limits", "list", "--help"], ["dev", "--help"]],
    ids=" ".join,
)
def test_duro_help_loads_none_of_them(args):
    code = textwrap.dedent(
        f"""
        from duro_devserver.cli import main
        try:
            main({args!r})
        except SystemExit as done:
            assert done.code == 0, done.code
        """
    )
    assert _loaded_after(code) == []


TEST_FILE = textwrap.dedent(
    """
    import sys

    HEAVY = {heavy!r}


    def _loaded():
        return [name for name in HEAVY if name in sys.modules]


    def test_sync():
        assert _loaded() == []


    async def test_async():  # run by duro's plugin, on an event loop of its own
        assert _loaded() == []
    """
)


def test_a_pytest_run_without_duro_env_loads_none_of_them_nor_the_harness(tmp_path: Path):
    """Only duro's plugin is loaded (other plugins installed here load some of these themselves)."""
    (tmp_path / "test_plain.py").write_text(
        TEST_FILE.format(heavy=(*HEAVY, "duro_harness._env", "duro.client._engine"))
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "duro_harness.plugin",
            "-W",
            "error",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
