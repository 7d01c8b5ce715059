"""Sync one account's records with the partner API, in a session of its own. Each account may have
5 sessions open at once and the whole app 20: a keyed limit. A sixth job of one account waits in
its account's queue; jobs of other accounts go on meanwhile."""

from pydantic import BaseModel

from duro import limit_slot, step, workflow

from . import partner


class SyncJob(BaseModel):
    job_id: str
    account_id: str
    pages: int = 1


@step(retries=3, retry_delay="5s")
async def sync_page(account_id: str, page: int) -> int:
    return await partner.fetch_page(account_id, page)


@workflow(name="sync_account")
async def sync_account(job: SyncJob) -> int:
    async with limit_slot("partner-api", key=f"account:{job.account_id}", label=job.job_id, timeout="1h"):
        return sum([await sync_page(job.account_id, page) for page in range(job.pages)])
