"""Patch markers (duro.patched, duro.deprecate_patch): old histories replay with False, new runs
record True, a restart in between keeps each run's branch, and a retired patch still replays."""

from __future__ import annotations

import pytest

from duro import DuroError, NonDeterminismError, deprecate_patch, patched, step, wait_for_signal, workflow

CODE = {"version": "old"}  # which code is "deployed": old, patched, deprecated, other-patch
EFFECTS: list[str] = []


@step
def charge_dollars(n: int) -> str:
    EFFECTS.append(f"dollars {n}")
    return f"${n}"


@step
def charge_cents(n: int) -> str:
    EFFECTS.append(f"cents {n}")
    return f"{n * 100}c"


@workflow
async def charge(n: int) -> list:
    code = CODE["version"]
    if code == "old":
        paid = await charge_dollars(n)
    elif code == "patched":
        paid = await charge_cents(n) if await patched("charge-in-cents") else await charge_dollars(n)
        again = await patched("charge-in-cents")  # one answer per run, and one marker
        assert again == paid.endswith("c")
    elif code == "deprecated":
        await deprecate_patch("charge-in-cents")
        paid = await charge_cents(n)
    else:
        paid = await charge_cents(n) if await patched("another-change") else await charge_dollars(n)
    note = await wait_for_signal("go", timeout="1h")
    return [paid, note]


@pytest.fixture(autouse=True)
def old_code():
    CODE["version"] = "old"
    EFFECTS.clear()
    yield
    CODE["version"] = "old"


async def kinds(run) -> list[tuple[str, str]]:
    return [(s.kind, s.name) for s in await run.steps()]


async def test_old_histories_replay_false_and_new_runs_record_true_across_restarts(duro_env):
    before = await duro_env.start(charge, 1)
    await duro_env.run_until_idle()
    CODE["version"] = "patched"  # the deploy
    await duro_env.restart()
    after = await duro_env.start(charge, 2)
    await duro_env.run_until_idle()
    await duro_env.restart()  # both replay: each keeps its branch
    await before.signal("go", "a")
    await after.signal("go", "b")
    assert await before.result() == ["$1", "a"]
    assert await after.result() == ["200c", "b"]
    assert EFFECTS == ["dollars 1", "cents 2"]  # no step body ran twice
    assert [k for k in await kinds(before) if k[0] == "patch"] == []
    assert [k for k in await kinds(after) if k[0] == "patch"] == [("patch", "charge-in-cents")]


async def test_a_deprecated_patch_replays_marked_histories_and_records_nothing_new(duro_env):
    CODE["version"] = "patched"
    marked = await duro_env.start(charge, 3)
    await duro_env.run_until_idle()
    CODE["version"] = "deprecated"
    await duro_env.restart()
    fresh = await duro_env.start(charge, 4)
    await duro_env.run_until_idle()
    await marked.signal("go", "x")
    await fresh.signal("go", "y")
    assert await marked.result() == ["300c", "x"]
    assert await fresh.result() == ["400c", "y"]
    assert not [k for k in await kinds(fresh) if k[0] == "patch"]


async def test_the_marker_of_another_change_is_a_divergence(duro_env):
    CODE["version"] = "patched"
    run = await duro_env.start(charge, 5)
    await duro_env.run_until_idle()
    CODE["version"] = "other-patch"
    await duro_env.restart()
    await run.signal("go")
    with pytest.raises(Exception) as failed:
        await run.result()
    assert isinstance(failed.value.__cause__ or failed.value, (NonDeterminismError, DuroError))
    assert "another-change" in str(failed.value) and "charge-in-cents" in str(failed.value)


@workflow
async def bad_patch(change_id: object) -> bool:
    return await patched(change_id)  # type: ignore[arg-type]


async def test_a_bad_change_id_is_a_clear_error(duro_env):
    run = await duro_env.start(bad_patch, "")
    with pytest.raises(Exception, match="change id must be a string of 1 to 200 characters"):
        await run.result()


async def test_patched_outside_a_run_says_so():
    with pytest.raises(DuroError, match="patched"):
        await patched("x")


@step
def charge_tokens(n: int) -> str:
    EFFECTS.append(f"tokens {n}")
    return f"{n}t"


SECOND = {"form": "chain"}  # how the second patch is written: an elif chain, or nested


@workflow
async def two_patches(n: int) -> list:
    if CODE["version"] == "first":
        paid = await charge_cents(n) if await patched("p1") else await charge_dollars(n)
    elif SECOND["form"] == "chain":  # the tempting form: diverges for runs recorded with p1
        if await patched("p2"):
            paid = await charge_tokens(n)
        elif await patched("p1"):
            paid = await charge_cents(n)
        else:
            paid = await charge_dollars(n)
    elif await patched("p1"):  # the nested form: each patch inside the one before it
        paid = await charge_tokens(n) if await patched("p2") else await charge_cents(n)
    else:
        paid = await charge_dollars(n)
    note = await wait_for_signal("go", timeout="1h")
    return [paid, note]


@pytest.mark.parametrize("form", ["chain", "nested"])
async def test_a_second_patch_nests_inside_the_first_an_elif_chain_diverges(duro_env, form):
    """docs/versioning.md: a run recorded with the first patch's marker replays the nested form;
    the ``if patched("p2") ... elif patched("p1")`` chain meets p1's marker where it asks for p2."""
    SECOND["form"] = form
    CODE["version"] = "first"
    run = await duro_env.start(two_patches, 6)
    await duro_env.run_until_idle()
    CODE["version"] = "second"
    await duro_env.restart()
    fresh = await duro_env.start(two_patches, 7)
    await duro_env.run_until_idle()
    await run.signal("go", "a")
    await fresh.signal("go", "b")
    assert await fresh.result() == ["7t", "b"]  # a new run takes the newest branch either way
    if form == "nested":
        assert await run.result() == ["600c", "a"]
    else:
        with pytest.raises(Exception) as failed:
            await run.result()
        assert "p1" in str(failed.value) and "p2" in str(failed.value)
