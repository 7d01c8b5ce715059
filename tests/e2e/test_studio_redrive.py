"""Re-driving runs from Studio, in a real Chromium against a real ``duro dev``: Retry on a failed
run's page, Fork from a chosen step, and Retry / Cancel on the filtered runs list with the count
confirmed. With DURO_SCREENSHOTS=1 it saves the screenshots docs/redrive.md shows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.e2e import test_studio as studio
from tests.e2e.test_studio import api, expect, screenshot, start
from tests.support.devserver import DevServer
from tests.support.waiting import wait_until

# Studio's fixtures (a Chromium per module, a fresh profile per test), as test_studio.py defines them
browser, context, page = studio.browser, studio.context, studio.page


def gateway_down(server: DevServer) -> Path:
    """The e2e project's switch: while the file exists, checkout's charge fails."""
    down = server.project / ".duro" / "gateway-down"
    down.write_text("")
    return down


def status(server: DevServer, run_id: str) -> str:
    return api(server, "GET", f"/api/runs/{run_id}")["run"]["status"]


def wait_status(server: DevServer, run_id: str, wanted: str) -> None:
    wait_until(lambda: status(server, run_id) == wanted, 15, f"run {run_id} to be {wanted}")


def test_retry_and_fork_from_a_runs_page(page: Any, dev_server: DevServer) -> None:
    down = gateway_down(dev_server)
    run_id = start(dev_server, "checkout", "order-17")
    wait_status(dev_server, run_id, "failed")
    page.goto(f"/#/runs/{run_id}")
    expect(page.get_by_test_id("run-status")).to_have_text("failed")
    expect(page.get_by_test_id("run-retry")).to_be_visible()
    expect(page.get_by_test_id("step-fork")).to_have_count(2)  # an ended run forks from any call
    expect(page.get_by_test_id("run-error")).to_contain_text("PaymentGatewayError")
    screenshot(page, "run-retry")

    down.unlink()  # the fix is deployed
    page.get_by_test_id("run-retry").click()
    page.get_by_test_id("confirm-retry-run").click()
    expect(page.get_by_test_id("run-status")).to_have_text("completed")
    expect(page.get_by_test_id("run-attempt")).to_have_text("2")
    rows = page.get_by_test_id("step-row")
    expect(rows).to_have_count(3)  # reserve; the failed charge of attempt 1; the charge of attempt 2
    earlier = page.locator("[data-testid=step-row][data-attempt='1'][data-seq='1']")
    expect(earlier).to_have_attribute("data-status", "failed")
    expect(earlier.get_by_test_id("step-attempt")).to_have_text("attempt 1")
    expect(page.locator("[data-testid=step-row][data-attempt='2'][data-seq='1']")).to_have_attribute(
        "data-status", "completed"
    )
    expect(page.get_by_test_id("run-retry")).to_be_hidden()  # completed: nothing to retry
    expect(page.get_by_test_id("step-fork")).to_have_count(2)  # the run's history: reserve, the new charge
    screenshot(page, "run-retried")

    # fork from the charge: a new run, its first call copied, the charge run again
    page.locator("[data-testid=step-row][data-attempt='2'][data-seq='1']").get_by_test_id("step-fork").click()
    page.get_by_test_id("confirm-fork-run").click()
    expect(page.get_by_test_id("run-forked-from")).to_contain_text(f"{run_id} at step #1")
    expect(page.get_by_test_id("run-status")).to_have_text("completed")
    expect(page.get_by_test_id("run-output")).to_contain_text("stock for order-17, charged order-17")
    expect(page).not_to_have_url(re.compile(f"#/runs/{run_id}$"))


def test_retry_and_cancel_the_runs_a_filter_shows(page: Any, dev_server: DevServer) -> None:
    down = gateway_down(dev_server)
    failed = [start(dev_server, "checkout", f"order-{n}") for n in range(3)]
    for run_id in failed:
        wait_status(dev_server, run_id, "failed")
    page.goto("/#/runs?status=failed&workflow=checkout")
    expect(page.get_by_test_id("run-row")).to_have_count(3)
    down.unlink()
    page.get_by_test_id("runs-retry").click()
    dialog = page.get_by_test_id("confirm-retry-runs")
    expect(dialog).to_have_text("Retry 3 runs")
    screenshot(page, "runs-bulk-retry")
    dialog.click()
    expect(page.get_by_test_id("run-row")).to_have_count(0)  # none failed any more
    for run_id in failed:
        wait_status(dev_server, run_id, "completed")

    holders = [start(dev_server, "hold", {"tenant": f"t{n}", "job": str(n)}) for n in range(2)]
    wait_until(lambda: status(dev_server, holders[0]) == "suspended", 15, "the first hold to hold the slot")
    page.goto("/#/runs?status=suspended&workflow=hold")
    expect(page.get_by_test_id("run-row")).to_have_count(1)
    expect(page.get_by_test_id("runs-retry")).to_have_count(0)  # an unfinished run is cancelled, not retried
    page.get_by_test_id("runs-cancel").click()
    page.get_by_test_id("confirm-cancel-runs").click()
    wait_status(dev_server, holders[0], "cancelled")
    assert status(dev_server, holders[1]) == "running"  # untouched: still in the slot's queue
