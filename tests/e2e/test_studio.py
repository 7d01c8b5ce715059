"""Studio in a real browser (Playwright driving Debian's Chromium) against a real ``duro dev``.

The project (tests/e2e/project) has one limit, ``partner-api`` (capacity 1, max hold 1h), and the
workflow ``hold``, which takes its slot (label ``job <job>``) and keeps it until the signal ``done``;
at most 2 active runs per tenant. Every wait is one of Playwright's bounded auto-waits.

With DURO_SCREENSHOTS=1 the tests also save the screenshots the README shows (docs/screenshots/*.png).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from playwright import sync_api

from tests.support.devserver import DevServer, running_dev_server
from tests.support.waiting import wait_until

expect = sync_api.expect

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The machine's network is closed: without these Chromium waits on background connections.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
WAIT_MS = 10_000
LIVE_MS = 4_000
LIMIT = "partner-api"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # A real browser is the point of these tests: no Chromium is a failure, not a skip
    # (`make test` installs Debian's chromium through scripts/install-system-deps.sh).
    assert Path(CHROMIUM).exists(), f"no Chromium at {CHROMIUM}: run 'apt-get install -y chromium'"
    expect.set_options(timeout=WAIT_MS)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
            expect.set_options(timeout=5_000)  # Playwright's default


@contextmanager
def browsing(browser: Any, url: str) -> Iterator[Any]:
    """A fresh browser profile on ``url``; fails the test on any uncaught error in Studio's pages."""
    context = browser.new_context(base_url=url, viewport={"width": 1280, "height": 800})
    context.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    context.on("weberror", lambda error: errors.append(str(error.error)))
    try:
        yield context
    finally:
        context.close()
    assert not errors, f"uncaught errors in Studio: {errors}"


@pytest.fixture
def context(browser: Any, dev_server: DevServer) -> Iterator[Any]:
    with browsing(browser, dev_server.url) as context:
        yield context


@pytest.fixture
def page(context: Any) -> Any:
    return context.new_page()


def start(server: DevServer, workflow: str, inp: Any) -> str:
    with server.client() as client:
        answer = client.post(f"/api/workflows/{workflow}/runs", json={"input": inp})
    assert answer.status_code == 201, answer.text
    return answer.json()["run"]["id"]


def api(server: DevServer, method: str, path: str, **kwargs: Any) -> Any:
    with server.client() as client:
        answer = client.request(method, path, **kwargs)
    assert answer.is_success, answer.text
    return answer.json()


def screenshot(page: Any, name: str, *, toasts: bool = False) -> None:
    """docs/screenshots/NAME.png: the whole page, as tall as its content (no empty space below),
    without its toasts unless ``toasts``. Taken always (a broken page fails here too); written to
    docs/ only with DURO_SCREENSHOTS=1, so that an ordinary test run leaves the checkout clean."""
    if os.environ.get("DURO_SCREENSHOTS") != "1":
        page.screenshot(animations="disabled")
        return
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": 240})
    page.evaluate("scrollTo(0, 0)")  # else the sticky top bar is drawn where the window was scrolled
    try:
        page.screenshot(
            path=SCREENSHOTS / f"{name}.png",
            full_page=True,
            animations="disabled",
            style=None if toasts else ".toasts { display: none; }",
        )
    finally:
        page.set_viewport_size(size)


def test_a_run_started_from_the_form_appears_live_in_the_runs_list(
    context: Any, dev_server: DevServer
) -> None:
    runs = context.new_page()
    runs.goto("/")
    expect(runs.get_by_test_id("runs-empty")).to_be_visible()
    expect(runs.get_by_test_id("live-indicator")).to_have_attribute("data-state", "live")

    # The form is generated from greet's input model: name (required string), times (integer, default 1).
    studio = context.new_page()
    studio.goto("/#/workflows")
    form = studio.get_by_test_id("start-form-greet")
    expect(form.get_by_test_id("input-times")).to_have_value("1")
    expect(form.get_by_test_id("input-name")).to_have_attribute("required", "")
    form.get_by_test_id("input-name").fill("ana")
    form.get_by_test_id("input-times").fill("2")
    screenshot(studio, "workflows")
    form.get_by_test_id("start-submit").click()

    # Created: the page moves to the new run, which completes.
    expect(studio).to_have_url(re.compile(r"#/runs/\w+$"))
    expect(studio.get_by_test_id("run-status")).to_have_text("completed")
    expect(studio.get_by_test_id("run-output")).to_contain_text("hello ana hello ana")
    run_id = studio.get_by_test_id("run-id").inner_text()

    # The runs list, never reloaded, shows it through the live events.
    row = runs.locator(f"[data-testid=run-row][data-run-id='{run_id}']")
    expect(row).to_contain_text("greet")
    expect(row.get_by_test_id("run-status")).to_have_text("completed")

    # A run started elsewhere (the API) shows up too, as running (it waits for its signal).
    held = start(dev_server, "hold", {"tenant": "acme", "job": "1"})
    expect(
        runs.locator(f"[data-testid=run-row][data-run-id='{held}'] [data-testid=run-status]")
    ).to_have_text(re.compile("running|suspended"))
    expect(runs.get_by_test_id("run-row")).to_have_count(2)
    screenshot(runs, "runs")

    # Filters: by workflow.
    runs.get_by_test_id("filter-workflow").select_option("greet")
    expect(runs.get_by_test_id("run-row")).to_have_count(1)
    expect(runs.get_by_test_id("run-row")).to_have_attribute("data-run-id", run_id)


def test_the_runs_list_pages_and_filters(page: Any, dev_server: DevServer) -> None:
    with dev_server.client() as client:
        for n in range(53):
            assert (
                client.post("/api/workflows/greet/runs", json={"input": {"name": f"n{n}"}}).status_code == 201
            )
    held = start(dev_server, "hold", {"tenant": "acme", "job": "1"})

    page.goto("/#/runs")
    rows = page.get_by_test_id("run-row")
    expect(rows).to_have_count(50)
    expect(rows.first).to_have_attribute("data-run-id", held)  # newest first
    page.get_by_test_id("runs-load-more").click()
    expect(rows).to_have_count(54)
    expect(page.get_by_test_id("runs-load-more")).to_be_hidden()

    page.get_by_test_id("filter-tag").fill("concurrency:acme")
    page.get_by_test_id("filter-tag").press("Enter")
    expect(page).to_have_url(re.compile(r"#/runs\?tag=concurrency%3Aacme$"))
    expect(rows).to_have_count(1)
    expect(rows).to_have_attribute("data-run-id", held)

    page.get_by_test_id("filter-clear").click()
    expect(page).to_have_url(re.compile(r"#/runs$"))
    expect(page.get_by_test_id("filter-tag")).to_have_value("")  # the page drawn again, unfiltered
    page.get_by_test_id("filter-status").select_option("suspended")  # hold waits for its signal
    expect(rows).to_have_count(1)
    page.get_by_test_id("filter-status").select_option("completed")
    expect(rows).to_have_count(50)
    page.get_by_test_id("filter-tag").fill("no-such-tag")
    page.get_by_test_id("filter-tag").press("Enter")
    expect(page.get_by_test_id("runs-empty")).to_contain_text("No run matches")


def test_the_runs_list_loads_more_as_you_scroll(page: Any, dev_server: DevServer) -> None:
    with dev_server.client() as client:
        for n in range(130):
            assert (
                client.post("/api/workflows/greet/runs", json={"input": {"name": f"n{n}"}}).status_code == 201
            )
    page.set_viewport_size({"width": 1200, "height": 700})
    page.goto("/#/runs")
    rows = page.get_by_test_id("run-row")
    expect(rows).to_have_count(50)
    first = rows.nth(0).element_handle()
    rows.nth(49).scroll_into_view_if_needed()  # to the end of the list: the next page comes
    expect(rows).to_have_count(100)
    rows.nth(99).scroll_into_view_if_needed()
    expect(rows).to_have_count(130)
    expect(page.get_by_test_id("runs-load-more")).to_be_hidden()
    ids = [row.get_attribute("data-run-id") for row in rows.all()]
    assert len(set(ids)) == 130  # each run once
    assert first.evaluate("row => row.isConnected")  # the rows shown stay as pages come and runs end


def test_a_start_over_the_quota_shows_the_refusal(page: Any, dev_server: DevServer) -> None:
    start(dev_server, "hold", {"tenant": "acme", "job": "1"})
    start(dev_server, "hold", {"tenant": "acme", "job": "2"})

    page.goto("/#/workflows")
    form = page.get_by_test_id("start-form-hold")  # a dict input: one JSON field
    form.get_by_test_id("input-json").fill('{"tenant": "acme", "job": "3"}')
    form.get_by_test_id("start-submit").click()
    refused = form.get_by_test_id("start-refused")
    expect(refused).to_be_visible()
    expect(refused).to_contain_text("acme")
    expect(refused).to_contain_text("allows 2 active runs and has 2")
    expect(page).to_have_url(re.compile("#/workflows$"))

    # Invalid JSON never reaches the server.
    form.get_by_test_id("input-json").fill("{tenant")
    form.get_by_test_id("start-submit").click()
    expect(form.get_by_test_id("start-error")).to_have_text(re.compile(r"^the input is not valid JSON: "))
    assert len(api(dev_server, "GET", "/api/runs")["runs"]) == 2


FORMS_CONFIG = """
from duro import define_workspace

workspace = define_workspace()
"""

FORMS_WORKFLOWS = """
from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field

from duro import workflow


class Plan(str, Enum):
    free = "free"
    pro = "pro"


class Address(BaseModel):
    city: str


class Signup(BaseModel):
    email: str = Field(description="where the receipt goes")
    seats: int
    price: float = 9.5
    plan: Plan = Plan.free
    region: Literal["eu", "us"]
    trial: bool = True
    coupon: str | None = None
    tags: list[str] = []
    address: Address | None = None


@workflow(name="signup")
async def signup(inp: Signup) -> dict:
    return inp.model_dump(mode="json")


@workflow(name="tick")
async def tick() -> str:
    return "tock"


@workflow(name="total")
async def total(inp: list[int]) -> int:
    return sum(inp)
"""


# The controls of Studio's screen that something else covers at their centre (a toast, say); those
# scrolled under the sticky top bar or out of the window do not count.
COVERED_CONTROLS = """() => {
  const bar = document.querySelector('header').getBoundingClientRect();
  const covered = [];
  for (const el of document.querySelectorAll('main :is(a, button, input, select, textarea)')) {
    const r = el.getBoundingClientRect();
    const [x, y] = [r.left + r.width / 2, r.top + r.height / 2];
    if (!r.width || !r.height || y < bar.bottom || y > innerHeight || x < 0 || x > innerWidth) continue;
    const top = document.elementFromPoint(x, y);
    if (!top || !(el === top || el.contains(top))) covered.push(el.dataset.testid || el.textContent);
  }
  return covered;
}"""


def test_start_forms_follow_the_input_schema(browser: Any, tmp_path: Path) -> None:
    project = tmp_path / "forms"
    (project / "workflows").mkdir(parents=True)
    (project / "duro.config.py").write_text(FORMS_CONFIG)
    (project / "workflows" / "forms.py").write_text(FORMS_WORKFLOWS)
    with running_dev_server(project) as server, browsing(browser, server.url) as context:
        page = context.new_page()
        page.goto("/#/workflows")
        form = page.get_by_test_id("start-form-signup")
        field = form.get_by_test_id
        # Primitive fields get inputs of their type, with defaults; enums a select; others JSON.
        expect(field("input-email")).to_have_attribute("type", "text")
        expect(field("input-email")).to_have_attribute("required", "")
        expect(form).to_contain_text("where the receipt goes")
        expect(field("input-seats")).to_have_attribute("type", "number")
        expect(field("input-price")).to_have_value("9.5")
        expect(field("input-plan").locator("option:checked")).to_have_text("free")
        expect(field("input-region").locator("option")).to_have_text(["eu", "us"])
        expect(field("input-trial")).to_be_checked()
        expect(field("input-coupon")).not_to_have_attribute("required", "")
        expect(field("input-tags")).to_have_value("[]")
        expect(field("input-json")).to_have_count(0)

        # A value the server refuses: its message, naming the field, and no run.
        field("input-email").fill("ana@example.com")
        field("input-seats").fill("3")
        field("input-address").fill('{"town": "Lugo"}')
        field("start-submit").click()
        expect(field("start-error")).to_contain_text("city")
        expect(page).to_have_url(re.compile("#/workflows$"))

        field("input-address").fill('{"city": "Lugo"}')
        field("input-plan").select_option(label="pro")
        field("input-region").select_option(label="us")
        field("input-trial").uncheck()
        field("input-tags").fill('["a", "b"]')
        field("run-id-input").fill("signup-ana")
        field("start-submit").click()
        expect(page).to_have_url(re.compile("#/runs/signup-ana$"))
        expect(page.get_by_test_id("run-status")).to_have_text("completed")
        with server.client() as client:
            output = client.get("/api/runs/signup-ana").json()["run"]["output"]
        assert output == {
            "email": "ana@example.com",
            "seats": 3,
            "price": 9.5,
            "plan": "pro",
            "region": "us",
            "trial": False,
            "coupon": None,
            "tags": ["a", "b"],
            "address": {"city": "Lugo"},
        }

        # No input: just the button. A list: one JSON box.
        page.goto("/#/workflows")
        tick = page.get_by_test_id("start-form-tick")
        expect(tick).to_contain_text("takes no input")
        tick.get_by_test_id("start-submit").click()
        expect(page.get_by_test_id("run-output")).to_have_text('"tock"')

        page.goto("/#/workflows")
        total = page.get_by_test_id("start-form-total")
        total.get_by_test_id("input-json").fill("[1, 2, 3]")
        total.get_by_test_id("start-submit").click()
        expect(page.get_by_test_id("run-output")).to_have_text("6")


SCALAR_WORKFLOWS = """
from duro import workflow


@workflow(name="shout")
async def shout(name: str) -> str:
    return name.upper()


@workflow(name="double")
async def double(n: int) -> int:
    return 2 * n


@workflow(name="flip")
async def flip(on: bool) -> bool:
    return not on


@workflow(name="note")
async def note(text: str | None) -> str:
    return "nothing" if text is None else text
"""


def test_scalar_inputs_get_one_field_of_their_type(browser: Any, tmp_path: Path) -> None:
    project = tmp_path / "scalars"
    (project / "workflows").mkdir(parents=True)
    (project / "duro.config.py").write_text(FORMS_CONFIG)
    (project / "workflows" / "scalars.py").write_text(SCALAR_WORKFLOWS)
    with running_dev_server(project) as server, browsing(browser, server.url) as context:
        page = context.new_page()

        def started(workflow: str, fill: Any) -> Any:
            """Fills the workflow's one field, starts it; the input the run got."""
            page.goto("/#/workflows")
            form = page.get_by_test_id(f"start-form-{workflow}")
            expect(form.get_by_test_id("input-json")).to_have_count(0)
            fill(form.get_by_test_id("input-value"))
            form.get_by_test_id("start-submit").click()
            expect(page.get_by_test_id("run-status")).to_have_text("completed")
            with server.client() as client:
                return client.get(f"/api/runs/{page.get_by_test_id('run-id').inner_text()}").json()["run"]

        # A str: a text field, required; what is typed is the input (no JSON quoting).
        page.goto("/#/workflows")
        value = page.get_by_test_id("start-form-shout").get_by_test_id("input-value")
        expect(value).to_have_attribute("type", "text")
        expect(value).to_have_attribute("required", "")
        expect(page.get_by_test_id("start-form-double").get_by_test_id("input-value")).to_have_attribute(
            "type", "number"
        )
        expect(page.get_by_test_id("start-form-flip").get_by_test_id("input-value")).to_have_attribute(
            "type", "checkbox"
        )
        expect(page.get_by_test_id("start-form-note").get_by_test_id("input-value")).not_to_have_attribute(
            "required", ""
        )
        value.fill("acme")
        screenshot(page, "workflows-scalar-inputs")

        run = started("shout", lambda field: field.fill("acme"))
        assert (run["input"], run["output"]) == ("acme", "ACME")
        run = started("double", lambda field: field.fill("21"))
        assert (run["input"], run["output"]) == (21, 42)
        run = started("flip", lambda field: field.check())
        assert (run["input"], run["output"]) == (True, False)
        # An optional one left empty sends null.
        run = started("note", lambda field: expect(field).to_have_value(""))
        assert (run["input"], run["output"]) == (None, "nothing")


def test_releasing_a_busy_slot_from_the_limits_screen_advances_the_queue(
    page: Any, dev_server: DevServer
) -> None:
    api(dev_server, "PUT", f"/api/limits/{LIMIT}/max-hold", json={"max_hold": "2h"})
    first = start(dev_server, "hold", {"tenant": "a", "job": "1"})
    second = start(dev_server, "hold", {"tenant": "b", "job": "2"})
    start(dev_server, "hold", {"tenant": "c", "job": "3"})

    # The second run waits in the queue: its hook step stands out and links to the limit.
    page.goto(f"/#/runs/{second}")
    hook = page.locator("[data-testid=step-row][data-kind=hook]")
    expect(hook).to_contain_text(f"Esperando hueco · {LIMIT}")
    expect(hook.get_by_test_id("hook-badge")).to_have_text("waiting for a slot")
    expect(hook.get_by_test_id("hook-limit-link")).to_have_attribute("href", f"#/limits/{LIMIT}")
    # ...and the page's head says so next to the status.
    expect(page.get_by_test_id("run-waiting-hint")).to_have_text(f"waiting for a slot · {LIMIT}")
    screenshot(page, "run-hook-step")

    page.goto("/#/limits")
    row = page.get_by_test_id(f"limit-row-{LIMIT}")
    expect(row.get_by_test_id("limit-busy")).to_have_text("1")
    expect(row.get_by_test_id("limit-waiting")).to_have_text("2")
    expect(row.get_by_test_id("max-hold-override-badge")).to_contain_text("config 1h")
    screenshot(page, "limits")

    row.get_by_test_id("limit-link").click()
    expect(page).to_have_url(re.compile(f"#/limits/{LIMIT}$"))
    slots = page.get_by_test_id("slot-row")
    queue = page.get_by_test_id("queue-row")
    expect(slots).to_have_count(1)
    expect(slots).to_contain_text("job 1")
    expect(slots.get_by_test_id("slot-run-link")).to_have_text(first)
    expect(queue).to_have_count(2)
    expect(queue.nth(0)).to_have_attribute("data-position", "1")
    expect(queue.nth(0)).to_contain_text("job 2")
    expect(queue.nth(1)).to_contain_text("job 3")
    expect(page.get_by_test_id("chart-busy-line")).to_be_visible()
    expect(page.get_by_test_id("chart-waiting-line")).to_be_visible()

    slot_id = api(dev_server, "GET", f"/api/limits/{LIMIT}/slots")["slots"][0]["id"]
    release = page.get_by_test_id(f"release-{slot_id}")
    dialog = page.get_by_test_id("confirm-dialog")

    # Cancel in the dialog: nothing happens.
    release.click()
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text(slot_id)
    page.get_by_test_id("confirm-dismiss").click()
    expect(dialog).to_be_hidden()
    expect(slots).to_contain_text("job 1")

    # Confirm: the slot goes to the head of the queue, which moves up.
    release.click()
    page.get_by_test_id("confirm-release").click()
    expect(dialog).to_be_hidden()
    expect(slots).to_have_count(1)
    expect(slots).to_contain_text("job 2")
    expect(slots).to_have_attribute("data-state", "busy")
    expect(queue).to_have_count(1)
    expect(queue).to_contain_text("job 3")
    expect(queue).to_have_attribute("data-position", "1")
    expect(page.get_by_test_id("stat-waiting")).to_contain_text("1")
    expect(page.get_by_test_id("limit-chart-svg")).to_have_attribute("data-waiting", "1")  # the chart follows
    screenshot(page, "limit-detail")

    # The second run got its slot: its hook step is closed.
    page.goto(f"/#/runs/{second}")
    expect(page.locator("[data-testid=step-row][data-kind=hook] [data-testid=step-status]")).to_have_text(
        "completed"
    )
    expect(page.get_by_test_id("run-waiting-hint")).to_have_count(0)


def test_a_long_queue_loads_more_as_you_scroll(page: Any, dev_server: DevServer) -> None:
    ids = [start(dev_server, "hold", {"tenant": f"t{n}", "job": str(n)}) for n in range(250)]
    wait_until(
        lambda: len(api(dev_server, "GET", f"/api/limits/{LIMIT}/slots?limit=1000")["slots"]) == 250,
        30,
        "250 slots of the limit, busy or waiting",
    )
    page.set_viewport_size({"width": 1200, "height": 700})
    page.goto(f"/#/limits/{LIMIT}")
    queue = page.get_by_test_id("queue-row")
    expect(queue).to_have_count(199)  # a page of 200 slots: the busy one and 199 waiting
    first = queue.nth(0).element_handle()
    queue.nth(198).scroll_into_view_if_needed()
    expect(queue).to_have_count(249)
    expect(queue.nth(248)).to_have_attribute("data-position", "249")
    expect(page.get_by_test_id("queue-load-more")).to_be_hidden()
    assert first.evaluate("row => row.isConnected")  # the rows shown stay as the next page comes
    assert len(ids) == 250


def test_runs_waiting_in_a_limits_queue_say_so_in_the_runs_list(page: Any, dev_server: DevServer) -> None:
    first = start(dev_server, "hold", {"tenant": "a", "job": "1"})
    second = start(dev_server, "hold", {"tenant": "b", "job": "2"})
    page.goto("/#/runs")
    expect(page.get_by_test_id("live-indicator")).to_have_attribute("data-state", "live")
    row = page.locator(f"[data-testid=run-row][data-run-id='{second}']")
    hint = row.get_by_test_id("run-waiting-hint")
    expect(hint).to_have_text(f"waiting for a slot · {LIMIT}")
    expect(hint).to_have_attribute("href", f"#/limits/{LIMIT}")
    expect(row).to_have_attribute("data-queued-for", LIMIT)  # the runs list API's queued_for
    expect(
        page.locator(f"[data-testid=run-row][data-run-id='{first}']").get_by_test_id("run-waiting-hint")
    ).to_have_count(0)  # it holds the slot
    screenshot(page, "runs-waiting")

    # The first gives the slot back: the second takes it, and the list, never reloaded, drops the hint.
    api(dev_server, "POST", f"/api/runs/{first}/signals/done", json=None)
    expect(page.locator(f"[data-testid=run-row][data-run-id='{first}']")).to_have_attribute(
        "data-status", "completed"
    )
    expect(hint).to_have_count(0)

    page.goto(f"/#/runs/{second}")
    expect(page.get_by_test_id("run-status")).to_have_text(re.compile("running|suspended"))
    expect(page.get_by_test_id("run-waiting-hint")).to_have_count(0)


def test_the_limit_page_shows_the_last_hours_waits_and_lost_releases(
    page: Any, dev_server: DevServer
) -> None:
    """With a 1 s max hold, the first run's slot is taken back (``hold`` releases only on "done": a
    lost release) and handed to the second, which waited about a second and then releases it."""
    api(dev_server, "PUT", f"/api/limits/{LIMIT}/max-hold", json={"max_hold": "1s"})
    page.goto(f"/#/limits/{LIMIT}")
    figures = page.get_by_test_id("limit-last-hour")
    expect(figures).to_contain_text("Last hour")
    expect(figures.get_by_test_id("last-hour-granted")).to_have_attribute("data-value", "0")
    expect(figures.get_by_test_id("last-hour-wait-p50").locator(".stat-value")).to_have_text("—")

    start(dev_server, "hold", {"tenant": "a", "job": "1"})
    second = start(dev_server, "hold", {"tenant": "b", "job": "2"})
    expect(page.get_by_test_id("slot-row")).to_contain_text("job 2")  # job 1's slot expired
    api(dev_server, "POST", f"/api/runs/{second}/signals/done", json=None)
    expect(page.get_by_test_id("slots-empty")).to_be_visible()

    expired = figures.get_by_test_id("last-hour-expired")
    expect(expired).to_have_attribute("data-value", "1")
    expect(expired).to_contain_text("Lost releases")
    expect(expired.locator(".stat-value.err")).to_have_text("1")  # a lost release stands out
    expect(figures.get_by_test_id("last-hour-granted")).to_have_attribute("data-value", "2")
    expect(figures.get_by_test_id("last-hour-timed-out")).to_have_attribute("data-value", "0")
    # nearest rank of two waits: p50 is the first's (at once), p90 and p99 the second's (about 1 s)
    p50 = figures.get_by_test_id("last-hour-wait-p50")
    expect(p50.locator(".stat-value")).to_have_text(re.compile(r"^\d+ ms$"))
    assert float(p50.get_attribute("data-value")) < 0.5
    for p in ("p90", "p99"):
        wait = figures.get_by_test_id(f"last-hour-wait-{p}")
        expect(wait.locator(".stat-value")).to_have_text(re.compile(r"^\d+ ms$|^\d+(\.\d)? s$"))
        assert float(wait.get_attribute("data-value")) >= 0.5
    # the figures sit beside the chart, not under it
    chart_box = page.get_by_test_id("limit-chart").bounding_box()
    figures_box = figures.bounding_box()
    assert figures_box["x"] >= chart_box["x"] + chart_box["width"]
    assert figures_box["y"] < chart_box["y"] + chart_box["height"]


def test_the_limits_screens_follow_live_events(context: Any, dev_server: DevServer) -> None:
    limits = context.new_page()
    limits.goto("/#/limits")
    row = limits.get_by_test_id(f"limit-row-{LIMIT}")
    expect(row.get_by_test_id("limit-busy")).to_have_text("0")
    detail = context.new_page()
    detail.goto(f"/#/limits/{LIMIT}")
    expect(detail.get_by_test_id("slots-empty")).to_be_visible()
    for page in (limits, detail):
        expect(page.get_by_test_id("live-indicator")).to_have_attribute("data-state", "live")

    # Within LIVE_MS, sooner than the screens' backup polls (5 s, 10 s): the events did it.
    first = start(dev_server, "hold", {"tenant": "a", "job": "1"})
    start(dev_server, "hold", {"tenant": "b", "job": "2"})
    expect(row.get_by_test_id("limit-busy")).to_have_text("1", timeout=LIVE_MS)
    expect(row.get_by_test_id("limit-waiting")).to_have_text("1", timeout=LIVE_MS)
    expect(detail.get_by_test_id("slot-row")).to_contain_text("job 1", timeout=LIVE_MS)
    expect(detail.get_by_test_id("queue-row")).to_contain_text("job 2", timeout=LIVE_MS)

    # The first job ends and gives its slot back: the second takes it, on both screens.
    api(dev_server, "POST", f"/api/runs/{first}/signals/done", json=None)
    expect(row.get_by_test_id("limit-waiting")).to_have_text("0", timeout=LIVE_MS)
    expect(row.get_by_test_id("limit-busy")).to_have_text("1", timeout=LIVE_MS)
    expect(detail.get_by_test_id("slot-row")).to_contain_text("job 2", timeout=LIVE_MS)
    expect(detail.get_by_test_id("queue-empty")).to_be_visible(timeout=LIVE_MS)


def test_editing_capacity_and_max_hold_shows_the_override_and_reset_clears_it(
    page: Any, dev_server: DevServer
) -> None:
    start(dev_server, "hold", {"tenant": "a", "job": "1"})
    start(dev_server, "hold", {"tenant": "b", "job": "2"})
    page.goto(f"/#/limits/{LIMIT}")
    capacity = page.get_by_test_id("stat-capacity")
    expect(page.get_by_test_id("queue-row")).to_have_count(1)
    expect(capacity.get_by_test_id("capacity-override-badge")).to_have_count(0)
    expect(page.get_by_test_id("capacity-reset")).to_be_disabled()

    # Out of range: the server's 422 message shows, nothing changes.
    page.get_by_test_id("capacity-input").fill("0")
    page.get_by_test_id("capacity-save").click()
    expect(page.get_by_test_id("capacity-error")).to_contain_text("greater than or equal to 1")
    expect(page.get_by_test_id("capacity-error")).to_contain_text("or Reset to go back to duro.config.py")
    expect(page.get_by_test_id("capacity-error")).not_to_contain_text("null")  # the API's word, not Studio's
    expect(capacity.get_by_test_id("capacity-override-badge")).to_have_count(0)

    # A raise: the badge shows the config's value, and the waiting run gets a slot at once.
    page.get_by_test_id("capacity-input").fill("2")
    page.get_by_test_id("capacity-save").click()
    expect(page.get_by_test_id("capacity-error")).to_be_hidden()
    expect(capacity.locator(".stat-value")).to_contain_text(re.compile("^2"))
    expect(capacity.get_by_test_id("capacity-override-badge")).to_contain_text("config 1")
    expect(page.get_by_test_id("queue-empty")).to_be_visible()
    expect(page.get_by_test_id("slot-row")).to_have_count(2)

    # The Limits screen shows the override too.
    page.get_by_test_id("nav-limits").click()
    row = page.get_by_test_id(f"limit-row-{LIMIT}")
    expect(row.get_by_test_id("limit-capacity")).to_contain_text("2")
    expect(row.get_by_test_id("capacity-override-badge")).to_be_visible()
    expect(row.get_by_test_id("limit-busy")).to_have_text("2")

    # Reset: back to duro.config.py's value, badge gone (the slots granted stay held).
    row.get_by_test_id("limit-link").click()
    page.get_by_test_id("capacity-reset").click()
    expect(capacity.get_by_test_id("capacity-override-badge")).to_have_count(0)
    expect(page.get_by_test_id("capacity-input")).to_have_value("1")
    expect(page.get_by_test_id("capacity-reset")).to_be_disabled()
    assert api(dev_server, "GET", f"/api/limits/{LIMIT}")["limit"]["capacity_override"] is None

    # Max hold: the same, with the server's validation.
    max_hold = page.get_by_test_id("stat-max-hold")
    page.get_by_test_id("max-hold-input").fill("40d")
    page.get_by_test_id("max-hold-save").click()
    expect(page.get_by_test_id("max-hold-error")).to_contain_text("at most 30 days")
    # Saved with the Reset at the window's bottom right, where toasts used to cover it: the toast
    # saying so sits in the top bar and covers no control.
    size = page.viewport_size
    page.set_viewport_size({"width": 900, "height": 600})
    reset = page.get_by_test_id("max-hold-reset")
    reset.evaluate("(el) => scrollBy(0, el.getBoundingClientRect().bottom - (innerHeight - 20))")
    page.get_by_test_id("max-hold-input").fill("2h")
    page.get_by_test_id("max-hold-input").press("Enter")
    expect(max_hold.locator(".stat-value")).to_contain_text(re.compile("^2h"))
    expect(max_hold.get_by_test_id("max-hold-override-badge")).to_contain_text("config 1h")
    toast = page.get_by_test_id("toast").first
    expect(toast).to_have_text(f"Max hold of {LIMIT} is now 2h")
    expect(reset).to_be_enabled()
    assert page.evaluate(COVERED_CONTROLS) == []
    page.set_viewport_size(size)
    screenshot(page, "limit-settings-toast", toasts=True)
    page.get_by_test_id("max-hold-reset").click()
    expect(max_hold.get_by_test_id("max-hold-override-badge")).to_have_count(0)
    expect(max_hold.locator(".stat-value")).to_have_text("1h")


def test_the_limit_chart_has_whole_evenly_spaced_y_ticks(page: Any, dev_server: DevServer) -> None:
    api(dev_server, "PUT", f"/api/limits/{LIMIT}/capacity", json={"capacity": 5})
    start(dev_server, "hold", {"tenant": "a", "job": "1"})
    page.goto(f"/#/limits/{LIMIT}")
    ticks = page.get_by_test_id("chart-y-tick")

    def evenly_spaced() -> None:
        ys = [float(tick.get_attribute("y") or "nan") for tick in ticks.all()]
        gaps = {round(a - b, 3) for a, b in pairwise(ys)}
        assert len(gaps) == 1 and gaps.pop() > 0, ys  # downwards from 0 at the bottom, one step apart

    # 5 was 0, 3, 5: now every count; larger scales step by 2, 5, 10...
    for capacity, expected in [
        (5, ["0", "1", "2", "3", "4", "5"]),
        (7, ["0", "2", "4", "6", "8"]),
        (20, ["0", "5", "10", "15", "20"]),
    ]:
        api(dev_server, "PUT", f"/api/limits/{LIMIT}/capacity", json={"capacity": capacity})
        expect(ticks).to_have_text(expected)
        evenly_spaced()


def test_a_run_page_sends_a_signal_and_cancels_with_confirmation(page: Any, dev_server: DevServer) -> None:
    first = start(dev_server, "hold", {"tenant": "a", "job": "1"})
    page.goto(f"/#/runs/{first}")
    expect(page.locator("[data-testid=step-row][data-kind=signal]")).to_have_attribute(
        "data-status", "waiting"
    )

    page.get_by_test_id("signal-name").fill("done")
    page.get_by_test_id("signal-payload").fill('{"by": "studio"}')
    page.get_by_test_id("signal-send").click()
    expect(page.get_by_test_id("run-status")).to_have_text("completed")
    expect(page.get_by_test_id("run-output")).to_contain_text("job 1 done")
    expect(page.get_by_test_id("run-cancel")).to_be_disabled()

    second = start(dev_server, "hold", {"tenant": "a", "job": "2"})
    page.goto(f"/#/runs/{second}")
    expect(page.get_by_test_id("run-status")).to_have_text(re.compile("running|suspended"))
    page.get_by_test_id("run-cancel").click()
    page.get_by_test_id("confirm-cancel-run").click()
    expect(page.get_by_test_id("run-status")).to_have_text("cancelled")
    # The error's short name, never a private module path.
    expect(page.get_by_test_id("run-error")).to_contain_text(re.compile(r"^RunCancelled: "))
    expect(page.get_by_test_id("run-error")).not_to_contain_text("duro.")
    screenshot(page, "run-cancelled")

    page.goto("/#/runs/no-such-run")
    expect(page.get_by_test_id("run-not-found")).to_be_visible()
    page.goto("/#/limits/no-such-limit")
    expect(page.get_by_test_id("limit-not-found")).to_be_visible()


def test_a_project_that_fails_to_load_shows_a_banner_until_fixed(page: Any, dev_server: DevServer) -> None:
    page.goto("/#/limits")
    expect(page.get_by_test_id(f"limit-row-{LIMIT}")).to_be_visible()
    expect(page.get_by_test_id("live-indicator")).to_have_attribute("data-state", "live")
    banner = page.get_by_test_id("load-error-banner")
    expect(banner).to_be_hidden()

    broken = dev_server.project / "workflows" / "broken.py"
    broken.write_text("def oops(:\n")
    expect(banner).to_be_visible(timeout=20_000)
    expect(page.get_by_test_id("load-error-traceback")).to_contain_text("SyntaxError")

    broken.unlink()
    expect(banner).to_be_hidden(timeout=20_000)
    expect(page.locator("[data-testid=toast][data-kind=reloaded]")).to_be_visible()


def test_with_a_token_studio_asks_for_it_then_works(browser: Any, e2e_project: Path) -> None:
    with (
        running_dev_server(e2e_project, args=("--token", "s3cret")) as server,
        browsing(browser, server.url) as context,
    ):
        page = context.new_page()
        page.goto("/")
        expect(page.get_by_test_id("runs-error")).to_contain_text("/?token=")

        page.goto("/?token=s3cret")  # sets the cookie and comes back to /
        expect(page.get_by_test_id("runs-empty")).to_be_visible()
        expect(page.get_by_test_id("live-indicator")).to_have_attribute("data-state", "live")
        page.goto("/#/workflows")
        page.get_by_test_id("start-form-greet").get_by_test_id("input-name").fill("eve")
        page.get_by_test_id("start-form-greet").get_by_test_id("start-submit").click()
        expect(page.get_by_test_id("run-output")).to_contain_text("hello eve")


VERSIONED_WORKFLOWS = """
from duro import step, wait_for_signal, workflow


@step
async def {first}(n: int) -> int:
    return n


@workflow(name="deal")
async def deal(n: int) -> int:
    await {first}(n)
    await wait_for_signal("go")
    return n


@workflow(name="charge", version="{version}")
async def charge(n: int) -> int:
    await {first}(n)
    await wait_for_signal("go")
    return n
"""


def test_a_divergence_and_the_versions_in_flight_show_in_studio(browser: Any, tmp_path: Path) -> None:
    """Runs started on the first code (deal and charge version 1) wait for "go"; the code changes
    (deal calls another step first, charge is now version 2). The deal, signalled, is replayed on
    the new code and fails: its page shows both calls at seq 0. The workflows page lists charge's
    version 1, which this server has no code for, with its unfinished run."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from duro import Engine

    project = tmp_path / "versions"
    (project / "workflows").mkdir(parents=True)
    (project / "duro.config.py").write_text(
        "from duro import define_workspace\n\nworkspace = define_workspace()\n"
    )
    code = project / "workflows" / "flow.py"
    code.write_text(VERSIONED_WORKFLOWS.format(first="reserve", version="1"))
    url = f"sqlite:///{project / '.duro' / 'dev.db'}"
    (project / ".duro").mkdir()

    async def in_flight() -> list[str]:
        engine = Engine.from_project(project, database_url=url)
        async with engine:
            handles = [await engine.start("deal", 1), await engine.start("charge", 2)]
            deadline = asyncio.get_running_loop().time() + 30
            for handle in handles:  # bounded polling on the condition
                while await handle.status() != "suspended":
                    assert asyncio.get_running_loop().time() < deadline, "the runs did not reach their wait"
                    await asyncio.sleep(0.01)
        engine.close()
        return [h.id for h in handles]

    with ThreadPoolExecutor(1) as pool:  # this thread runs the browser's event loop
        deal_id, charge_id = pool.submit(asyncio.run, in_flight()).result(60)
    code.write_text(VERSIONED_WORKFLOWS.format(first="refund", version="2"))
    with running_dev_server(project) as server, browsing(browser, server.url) as context:
        page = context.new_page()
        page.goto("/#/workflows")
        row = page.get_by_test_id("version-charge-1")
        expect(row).to_contain_text("no code here")
        expect(row.get_by_test_id("version-unfinished")).to_have_text("1")
        expect(page.get_by_test_id("version-charge-2")).to_contain_text("registered")
        expect(page.get_by_test_id("version-deal-1").get_by_test_id("version-unfinished")).to_have_text("1")
        screenshot(page, "workflows-versions")

        with server.client() as client:
            client.post(f"/api/runs/{deal_id}/signals/go", json=None)
        page.goto(f"/#/runs/{deal_id}")
        expect(page.get_by_test_id("run-status")).to_have_text("failed", timeout=20_000)
        expect(page.get_by_test_id("run-error")).to_contain_text("NonDeterminismError")
        expect(page.get_by_test_id("divergence-seq")).to_have_text("0")
        expect(page.get_by_test_id("divergence-recorded")).to_contain_text("reserve")
        expect(page.get_by_test_id("divergence-asked")).to_contain_text("refund")
        screenshot(page, "run-divergence")

        page.goto("/#/workflows")  # the failed deal has left the unfinished count; charge v1 waits on
        expect(page.get_by_test_id("version-deal-1").get_by_test_id("version-unfinished")).to_have_text("0")
        expect(page.get_by_test_id("version-charge-1").get_by_test_id("version-unfinished")).to_have_text("1")
        with server.client() as client:
            assert client.get(f"/api/runs/{charge_id}").json()["run"]["version"] == "1"


LONG_WORKFLOWS = """
from duro import step, workflow


@step
async def tick(i: int) -> int:
    return i


@workflow
async def long(n: int) -> int:
    total = 0
    for i in range(n):
        total += await tick(i)
    return total
"""


def test_a_long_runs_steps_come_a_page_at_a_time(browser: Any, tmp_path: Path) -> None:
    """A run of 450 steps: its page shows the first 200 and a button; each click adds the next 200,
    in order, until the last step shows and the button goes."""
    project = tmp_path / "long"
    (project / "workflows").mkdir(parents=True)
    (project / "duro.config.py").write_text(
        "from duro import define_workspace\n\nworkspace = define_workspace()\n"
    )
    (project / "workflows" / "long.py").write_text(LONG_WORKFLOWS)
    with running_dev_server(project) as server, browsing(browser, server.url) as context:
        run_id = start(server, "long", 450)
        page = context.new_page()
        page.goto(f"/#/runs/{run_id}")
        expect(page.get_by_test_id("run-status")).to_have_text("completed", timeout=30_000)
        rows = page.get_by_test_id("step-row")
        more = page.get_by_test_id("steps-more")
        expect(rows).to_have_count(200)
        expect(more).to_contain_text("200 shown")
        more.click()
        expect(rows).to_have_count(400)
        more.click()
        expect(rows).to_have_count(450)
        expect(more).to_have_count(0)
        seqs = rows.evaluate_all("(rows) => rows.map((row) => Number(row.dataset.seq))")
        assert seqs == list(range(450))


KEYED_CONFIG = """
from duro import Limit, define_workspace

workspace = define_workspace(limits={"partner-api": Limit(capacity=3, per_key=1, max_hold="1h")})
"""
KEYED_WORKFLOWS = """
from duro import limit_slot, wait_for_signal, workflow


@workflow(name="session")
async def session(account: str) -> str:
    async with limit_slot("partner-api", key=f"account:{account}", label=account):
        await wait_for_signal("done", timeout="1h")
    return account
"""


def test_a_keyed_limits_page_lists_its_keys_and_edits_one_keys_capacity(browser: Any, tmp_path: Path) -> None:
    project = tmp_path / "keyed"
    (project / "workflows").mkdir(parents=True)
    (project / "duro.config.py").write_text(KEYED_CONFIG)
    (project / "workflows" / "sessions.py").write_text(KEYED_WORKFLOWS)
    with running_dev_server(project) as server, browsing(browser, server.url) as context:
        for account in ("acme", "acme", "globex"):
            start(server, "session", account)
        page = context.new_page()
        page.goto(f"/#/limits/{LIMIT}")
        rows = page.get_by_test_id("key-row")
        # busiest first: both hold one slot, acme has one more waiting
        expect(rows).to_have_count(2)
        expect(rows.nth(0)).to_have_attribute("data-key", "account:acme")
        expect(rows.nth(0).get_by_test_id("key-waiting")).to_have_text("1")
        expect(rows.nth(1)).to_have_attribute("data-key", "account:globex")

        page.get_by_test_id("keys-search").fill("glob")
        expect(rows).to_have_count(1)
        expect(rows.nth(0)).to_have_attribute("data-key", "account:globex")
        page.get_by_test_id("keys-search").fill("")
        expect(rows).to_have_count(2)

        # a bad value: the server's message, nothing changes
        acme = page.locator('[data-testid="key-row"][data-key="account:acme"]')
        acme.get_by_test_id("key-capacity-input").fill("0")
        acme.get_by_test_id("key-capacity-save").click()
        expect(acme.get_by_test_id("key-capacity-error")).to_contain_text("capacity")
        # a raise: acme's waiting run gets its slot at once, and the row says it is an override
        acme.get_by_test_id("key-capacity-input").fill("2")
        acme.get_by_test_id("key-capacity-save").click()
        acme = page.locator('[data-testid="key-row"][data-key="account:acme"]')
        expect(acme.get_by_test_id("key-override-badge")).to_be_visible()
        expect(acme.get_by_test_id("key-busy")).to_have_text("2")
        expect(acme.get_by_test_id("key-waiting")).to_have_text("0")
        screenshot(page, "limit-keys")
        acme.get_by_test_id("key-capacity-reset").click()
        acme = page.locator('[data-testid="key-row"][data-key="account:acme"]')
        expect(acme.get_by_test_id("key-override-badge")).to_have_count(0)
        expect(acme.get_by_test_id("key-capacity")).to_have_text("1")
        keys = api(server, "GET", f"/api/limits/{LIMIT}/keys")["keys"]
        assert [(k["key"], k["overridden"], k["busy"]) for k in keys] == [
            ("account:acme", False, 2),  # lowering takes no slot back
            ("account:globex", False, 1),
        ]


def test_the_rates_screens_show_the_window_and_pause_raise_and_resume_a_rate(
    page: Any, dev_server: DevServer
) -> None:
    """partner-calls allows 2 a minute: three calls leave one waiting. Studio shows the window's
    use, pauses the rate, raises its limit (the waiter stays held by the pause), then resumes it:
    the waiter is granted."""
    runs = [start(dev_server, "call", f"job{n}") for n in range(3)]
    page.goto("/#/rates")
    row = page.get_by_test_id("rate-row-partner-calls")
    expect(row.get_by_test_id("rate-use")).to_contain_text("2 / 2")
    expect(row.get_by_test_id("rate-waiting")).to_have_text("1")
    screenshot(page, "rates")
    row.get_by_test_id("rate-link").click()
    expect(page.get_by_test_id("rate-detail")).to_be_visible()
    expect(page.get_by_test_id("stat-granted")).to_contain_text("2 / 2")
    waiter = page.get_by_test_id("waiter-row")
    expect(waiter).to_have_count(1)
    expect(waiter.get_by_test_id("waiter-run-link")).to_have_text(runs[2])
    expect(page.get_by_test_id("limit-chart-svg")).to_have_attribute("data-waiting", "1")

    page.get_by_test_id("pause-input").fill("soon")
    page.get_by_test_id("pause").click()
    expect(page.get_by_test_id("pause-error")).to_contain_text("soon")
    page.get_by_test_id("pause-input").fill("10m")
    page.get_by_test_id("pause").click()
    expect(page.get_by_test_id("paused-badge")).to_be_visible()
    page.get_by_test_id("rate-limit-input").fill("3")
    page.get_by_test_id("rate-limit-save").click()
    expect(page.get_by_test_id("limit-override-badge")).to_be_visible()
    expect(page.get_by_test_id("stat-waiting")).to_contain_text("1")  # the pause holds it
    screenshot(page, "rate-detail")
    page.get_by_test_id("resume").click()
    expect(page.get_by_test_id("waiters-empty")).to_be_visible()
    expect(page.get_by_test_id("stat-granted")).to_contain_text("3 / 3")
    wait_until(
        lambda: api(dev_server, "GET", f"/api/runs/{runs[2]}")["run"]["status"] == "completed",
        15,
        "the granted run to complete",
    )
    page.get_by_test_id("rate-limit-reset").click()
    expect(page.get_by_test_id("limit-override-badge")).to_have_count(0)
