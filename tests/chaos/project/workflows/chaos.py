"""The chaos workflows: a per-tenant quota on every top-level run, both limits, short durable
sleeps, signals, children, and steps that leave a mark outside duro (``effects.mark``) each time they execute.

Every run is started with ``run_id == job.id`` (children too), so a step knows its run from its
argument. Each step name occurs at most once per run: ``(run id, step name)`` names one step.
Outcomes the workflows expect (a slot wait timing out, a child refused by its quota) are caught and
returned, so a run that ends ``failed`` is always a finding.
"""

from __future__ import annotations

from pydantic import BaseModel

from duro import (
    ChildWorkflowError,
    Concurrency,
    SlotTimeoutError,
    acquire_slot,
    child,
    limit_slot,
    release_slot,
    sleep,
    step,
    wait_for_signal,
    with_limit,
    workflow,
)

from .effects import mark

TENANT_LIMIT = 4  # runs of one tenant active at once (top-level runs)
KIDS_LIMIT = 2  # children of one tenant active at once
ANSWER = "answer"  # the signal a chaos.ask run waits for (the driver's client sends it)


class Job(BaseModel):
    id: str  # the run's id
    tenant: str
    n: int  # drives the (deterministic) durations and choices
    patience: str = "60s"  # how long the run waits for a slot


def pause(n: int, low: int, high: int) -> str:
    """A duration between ``low`` and ``high`` ms, fixed by ``n`` (the same on every replay)."""
    return f"{low + (n * 7919) % (high - low + 1)}ms"


TENANT = Concurrency(key=lambda job: f"tenant:{job.tenant}", limit=TENANT_LIMIT)
KIDS = Concurrency(key=lambda job: f"kids:{job.tenant}", limit=KIDS_LIMIT)


# -- steps: sync ones run in the worker's threads, async ones on its loop -------------------------


@step
def dial(run_id: str) -> str:
    return mark(run_id, "dial")


@step
async def talk(run_id: str) -> str:
    return mark(run_id, "talk")


@step
def hangup(run_id: str) -> str:
    return mark(run_id, "hangup")


@step
async def give_up(run_id: str) -> str:
    return mark(run_id, "give_up")


@step
def fetch(run_id: str) -> str:
    return mark(run_id, "fetch")


@step
async def push(run_id: str) -> str:
    return mark(run_id, "push")


@step
def ack(run_id: str) -> str:
    return mark(run_id, "ack")


@step
async def plan(run_id: str) -> str:
    return mark(run_id, "plan")


@step
def merge(run_id: str) -> str:
    return mark(run_id, "merge")


@step
def question(run_id: str) -> str:
    return mark(run_id, "question")


@step
async def reply(run_id: str) -> str:
    return mark(run_id, "reply")


@step
def prepare(run_id: str) -> str:
    return mark(run_id, "prepare")


@step
async def deliver(run_id: str) -> str:
    return mark(run_id, "deliver")


# -- workflows -------------------------------------------------------------------------------------


@workflow(name="chaos.call", concurrency=TENANT)
async def call(job: Job) -> str:
    """Takes a line with acquire_slot / release_slot; one call in 25 forgets to release it."""
    await dial(job.id)
    try:
        slot = await acquire_slot("lines", label=job.id, timeout=job.patience)
    except SlotTimeoutError:
        await give_up(job.id)
        return "timed_out"
    await sleep(pause(job.n, 200, 600))
    await talk(job.id)
    outcome = "kept"  # max_hold takes the line back
    if job.n % 25 != 7:
        outcome = "released" if (await release_slot(slot.id)).released else "expired"
    await sleep(pause(job.n + 1, 200, 1000))
    await hangup(job.id)
    return outcome


@workflow(name="chaos.sync", concurrency=TENANT)
async def sync(job: Job) -> str:
    """Pushes to the partner API under with_limit."""
    await fetch(job.id)

    async def body() -> str:
        await sleep(pause(job.n, 100, 400))
        return await push(job.id)

    try:
        await with_limit("partner-api", body, label=job.id, timeout=job.patience)
    except SlotTimeoutError:
        return "timed_out"
    await sleep(pause(job.n + 1, 200, 2000))
    await ack(job.id)
    return "pushed"


@workflow(name="chaos.ask", concurrency=TENANT)
async def ask(job: Job) -> str:
    """Asks, then waits (suspended) for the ``answer`` signal the client sends a moment later."""
    await question(job.id)
    answer = await wait_for_signal(ANSWER, timeout="60s")
    if answer is None:
        return "unanswered"
    await sleep(pause(job.n, 100, 500))
    await reply(job.id)
    return "answered"


@workflow(name="chaos.leaf", concurrency=KIDS)
async def leaf(job: Job) -> str:
    """A child: a step, then a partner-api slot through limit_slot."""
    await prepare(job.id)
    try:
        async with limit_slot("partner-api", label=job.id, timeout=job.patience):
            await sleep(pause(job.n, 100, 300))
            await deliver(job.id)
    except SlotTimeoutError:
        return "timed_out"
    return "delivered"


@workflow(name="chaos.parent", concurrency=TENANT)
async def parent(job: Job) -> str:
    """Two children one after the other (a child refused by the kids quota is counted, not fatal)."""
    await plan(job.id)
    outcomes = []
    for i in range(2):
        kid = Job(id=f"{job.id}.k{i}", tenant=job.tenant, n=job.n + i, patience=job.patience)
        try:
            outcomes.append(await child(leaf, kid, run_id=kid.id))
        except ChildWorkflowError:
            outcomes.append("refused")
    await sleep(pause(job.n + 2, 200, 1000))
    await merge(job.id)
    return ",".join(outcomes)
