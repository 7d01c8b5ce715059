"""Workflows whose every step marks each execution in the effect log (``effects.mark``).

Every run is started with ``run_id == job.id``, so a step knows its run from its argument, and each
step name occurs once per run: ``(run id, step name)`` names one step.
"""

from __future__ import annotations

from pydantic import BaseModel

from duro import sleep, step, workflow

from .effects import mark


class Job(BaseModel):
    id: str  # the run's id
    nap: str = "3s"  # each durable sleep


# sync steps run in the worker's threads, async ones on its event loop


@step
def a(run_id: str) -> str:
    return mark(run_id, "a")


@step
async def b(run_id: str) -> str:
    return mark(run_id, "b")


@step
def c(run_id: str) -> str:
    return mark(run_id, "c")


@workflow(name="fence.nap")
async def nap(job: Job) -> list[str]:
    """a, one durable sleep, then b and c."""
    done = [await a(job.id)]
    await sleep(job.nap)
    done.append(await b(job.id))
    done.append(await c(job.id))
    return done


@workflow(name="fence.hop")
async def hop(job: Job) -> list[str]:
    """a, sleep, b, sleep, c."""
    done = [await a(job.id)]
    await sleep(job.nap)
    done.append(await b(job.id))
    await sleep(job.nap)
    done.append(await c(job.id))
    return done
