"""Welcome a new user: an email now, a second one a day later.

A step's result is recorded when it returns: after a restart the run is replayed and a finished
step is not called again. (A crash between the call and the record runs it once more, so a real
mail call should carry an idempotency key.) The one-day ``sleep`` is durable: it survives restarts
and costs nothing while it waits.
"""

from pydantic import BaseModel

from duro import sleep, step, workflow


# The run's input: duro validates it, and Studio builds the start form from its JSON schema.
class NewUser(BaseModel):
    """Someone who just signed up."""

    email: str
    name: str


@step(retries=3, retry_delay="10s")  # a failing call is tried again: 3 retries, 10 s apart
async def send_email(to: str, subject: str) -> str:
    # A real app calls its mail provider here; what the step returns is recorded.
    return f"sent {subject!r} to {to}"


@workflow  # its name is the function's: "welcome"
async def welcome(user: NewUser) -> list[str]:
    first = await send_email(user.email, f"Welcome, {user.name}!")
    await sleep("1d")  # the run is `suspended` until then
    second = await send_email(user.email, "Three tips for your first week")
    return [first, second]
