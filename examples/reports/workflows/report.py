"""A monthly report that pulls pages from a partner API, one session per page, never more than the
partner's 5 sessions at once across every report running (``with_limit``)."""

from duro import sleep, step, with_limit, workflow

PAGES = 3


@step(retries=3, retry_delay="5s")
async def fetch_page(tenant: str, page: int) -> list[int]:
    await sleep_for_partner()
    return [page * 10 + i for i in range(3)]


async def sleep_for_partner() -> None:  # the partner's latency (plain asyncio, not durable)
    return None


@workflow(name="monthly_report")
async def monthly_report(tenant: str) -> dict:
    rows: list[int] = []
    for page in range(PAGES):

        async def pull(page: int = page) -> list[int]:
            data = await fetch_page(tenant, page)
            await sleep("2m")  # the session stays open while the partner prepares the next page
            return data

        rows += await with_limit("partner-api", pull, label=f"{tenant} p{page}", timeout="1h")
    return {"tenant": tenant, "rows": len(rows)}
