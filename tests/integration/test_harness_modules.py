"""A test that imports the project's workflow module at its top holds the very module the engine
runs: a ``monkeypatch`` of the provider reaches the step, and what the step writes into module state
(a fake's call log) is what the test reads. Plain pytest and pytest-asyncio's auto mode, each in a
fresh interpreter, in a project laid out as an app's is (``duro.config.py``, ``workflows/``,
``tests/``)."""

from __future__ import annotations

import textwrap

import pytest

PROVIDER = """
    CALLS: list[str] = []  # module state a test may read


    def place(number: str) -> str:
        raise RuntimeError("the real provider must not be called from the tests")
"""

CALLS = """
    from duro import step, workflow

    from workflows import provider


    @step
    def dial(number: str) -> str:
        provider.CALLS.append(number)
        return provider.place(number)


    @workflow
    async def place_call(number: str) -> str:
        return await dial(number)
"""

TEST = """
    import pytest

    from workflows import provider  # imported before duro_env loads the project


    async def test_a_monkeypatched_provider_reaches_the_step(duro_env, monkeypatch):
        monkeypatch.setattr(provider, "place", lambda number: f"fake call to {number}")
        run = await duro_env.start("place_call", "+3460000000")
        assert await run.result() == "fake call to +3460000000"
        assert provider.CALLS == ["+3460000000"]


    async def test_again_in_a_second_test(duro_env, monkeypatch):
        monkeypatch.setattr(provider, "place", lambda number: "second")
        run = await duro_env.start("place_call", "+3461111111")
        assert await run.result() == "second"
        assert provider.CALLS[-1] == "+3461111111"
"""


def make_project(pytester: pytest.Pytester, ini: str) -> None:
    pytester.makefile(".ini", pytest=f"[pytest]\npythonpath = .\ntestpaths = tests\n{ini}")
    pytester.mkpydir("workflows")
    (pytester.path / "workflows" / "provider.py").write_text(textwrap.dedent(PROVIDER))
    (pytester.path / "workflows" / "calls.py").write_text(textwrap.dedent(CALLS))
    (pytester.path / "duro.config.py").write_text(
        "from duro import define_workspace\n\nworkspace = define_workspace()\n"
    )
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_calls.py").write_text(textwrap.dedent(TEST))


def test_plain_pytest(pytester):
    make_project(pytester, "")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:asyncio", "-W", "error")
    result.assert_outcomes(passed=2)


def test_pytest_asyncio_auto_mode(pytester):
    make_project(pytester, "asyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error")
    result.assert_outcomes(passed=2)
