"""Copy an account's orders from a partner API that allows only 2 sessions at once.

Every run shares the ``partner-api`` limit declared in ``duro.config.py``. ``with_limit`` takes a
session (a slot) for the body and gives it back when the body returns or raises. When both sessions
are busy, a third run waits in the limit's durable queue: its status stays ``running``, and Studio
shows it on the Limits screen and as a step ``Esperando hueco · partner-api`` in the run.
"""

from duro import sleep, step, with_limit, workflow


@step(retries=3, retry_delay="5s")
async def request_export(account: str) -> str:
    # A real app asks the partner for an export of the account's orders here.
    return f"export-{account}"


@step(retries=3, retry_delay="5s")
async def download_export(export_id: str) -> list[dict]:
    # ... and downloads it here. A step's result must be JSON-able: it is recorded.
    return [{"id": f"{export_id}-{n}", "total": 10 * n} for n in (1, 2, 3)]


@workflow
async def sync_orders(account: str) -> dict:
    async def in_a_session() -> list[dict]:
        export_id = await request_export(account)
        await sleep("1m")  # the partner builds the export; our session stays open meanwhile
        return await download_export(export_id)

    # Wait at most an hour for a session; after that, with_limit raises SlotTimeoutError.
    orders = await with_limit("partner-api", in_a_session, label=account, timeout="1h")
    return {"account": account, "orders": len(orders), "total": sum(o["total"] for o in orders)}
