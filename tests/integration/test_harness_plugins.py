"""duro_env beside the tools an app's tests use: pytest-asyncio (strict and auto mode), anyio's
marker, async fixtures taking duro_env, and a FastAPI app built and driven inside a duro_env test.
Each case runs in a fresh interpreter (``runpytest_subprocess``): nothing imported by this run leaks in."""

from __future__ import annotations

import textwrap

import pytest

WORKFLOWS = """
    import pytest
    from duro import sleep, workflow

    @workflow
    async def nap(n: int) -> str:
        await sleep("1h")
        return f"rested {n}"
"""

STRICT = """
    import pytest_asyncio

    @pytest.mark.asyncio
    async def test_marked(duro_env):
        run = await duro_env.start(nap, 1)
        await duro_env.advance("1h")
        assert await run.result() == "rested 1"

    async def test_unmarked_runs_on_the_plugins_own_loop(duro_env):
        run = await duro_env.start(nap, 2)
        await duro_env.advance("1h")
        assert await run.result() == "rested 2"

    @pytest.mark.asyncio(loop_scope="module")
    async def test_on_a_module_scoped_loop(duro_env):
        run = await duro_env.start(nap, 3)
        await duro_env.advance("1h")
        assert await run.result() == "rested 3"

    @pytest_asyncio.fixture
    async def napping(duro_env):
        run = await duro_env.start(nap, 4)
        yield run
        await duro_env.advance("30m")  # the environment still runs at the fixture's teardown
        assert await run.result() == "rested 4"

    @pytest.mark.asyncio
    async def test_an_async_fixture_takes_duro_env(duro_env, napping):
        await duro_env.advance("30m")
        assert await napping.status() == "suspended"
"""

AUTO = """
    import pytest_asyncio

    async def test_unmarked(duro_env):
        run = await duro_env.start(nap, 1)
        await duro_env.advance("1h")
        assert await run.result() == "rested 1"

    @pytest.fixture
    async def napping(duro_env):
        run = await duro_env.start(nap, 2)
        yield run
        await duro_env.advance("30m")
        assert await run.result() == "rested 2"

    async def test_an_async_fixture_takes_duro_env(duro_env, napping):
        await duro_env.advance("30m")
        assert await napping.status() == "suspended"
"""

ANYIO = """
    @pytest.fixture
    def anyio_backend():
        return "asyncio"

    @pytest.mark.anyio
    async def test_marked(duro_env):
        run = await duro_env.start(nap, 1)
        await duro_env.advance("1h")
        assert await run.result() == "rested 1"

    @pytest.fixture
    async def napping(duro_env, anyio_backend):
        run = await duro_env.start(nap, 2)
        yield run
        await duro_env.advance("30m")
        assert await run.result() == "rested 2"

    @pytest.mark.anyio
    async def test_an_async_fixture_takes_duro_env(duro_env, napping):
        await duro_env.advance("30m")
        assert await napping.status() == "suspended"
"""

FASTAPI = """
    import sys

    import httpx

    from duro import step

    @step
    async def greet(name: str) -> str:
        return f"hello {name}"

    @workflow
    async def greeting(name: str) -> str:
        return await greet(name)

    async def test_a_fastapi_app_starts_a_workflow_inside_duro_env(duro_env):
        assert "pydantic.v1" not in sys.modules and "fastapi" not in sys.modules
        from fastapi import FastAPI  # imported under the frozen clock, pydantic.v1 with it

        app = FastAPI()

        @app.post("/greetings/{name}", status_code=202)
        async def start_greeting(name: str) -> dict[str, str]:
            run = await greeting.start(name)
            return {"run_id": run.id}

        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            response = await client.post("/greetings/ada")
        assert response.status_code == 202
        run = duro_env.handle(response.json()["run_id"])
        assert await run.result() == "hello ada"
        import pydantic.v1

        assert pydantic.v1.types.ConstrainedDate.__mro__[1].__module__ == "datetime"  # the real date
"""


def run_case(pytester: pytest.Pytester, body: str, *options: str) -> pytest.RunResult:
    if "no:asyncio" not in options:  # pytest-asyncio asks for it (a warning, an error here)
        pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_case=textwrap.dedent(WORKFLOWS) + textwrap.dedent(body))
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error", *options)


def test_pytest_asyncio_strict_mode(pytester):
    run_case(pytester, STRICT).assert_outcomes(passed=4)


def test_pytest_asyncio_auto_mode(pytester):
    run_case(pytester, AUTO, "-o", "asyncio_mode=auto").assert_outcomes(passed=2)


def test_anyio_marker_on_the_asyncio_backend(pytester):
    run_case(pytester, ANYIO, "-p", "no:asyncio").assert_outcomes(passed=2)


def test_anyio_with_pytest_asyncio_installed_in_strict_mode(pytester):
    run_case(pytester, ANYIO).assert_outcomes(passed=2)


@pytest.mark.parametrize("mode", ["plugin", "strict", "auto", "anyio"])
def test_a_fastapi_app_built_and_driven_inside_duro_env(pytester, mode):
    body, options = FASTAPI, ()
    if mode == "strict":
        body = body.replace("    async def test_", "    @pytest.mark.asyncio\n    async def test_")
    elif mode == "auto":
        options = ("-o", "asyncio_mode=auto")
    elif mode == "anyio":
        body = body.replace("    async def test_", "    @pytest.mark.anyio\n    async def test_")
        body += '\n    @pytest.fixture\n    def anyio_backend():\n        return "asyncio"\n'
    run_case(pytester, body, *options).assert_outcomes(passed=1)
