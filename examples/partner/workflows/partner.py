"""The partner API's client (a stand-in here: a real app makes the HTTP call; tests replace it)."""

import asyncio


async def fetch_page(account_id: str, page: int) -> int:
    await asyncio.sleep(0)
    return 10  # records on the page
