"""A child workflow: charge a payment. Started by ``fulfil_order`` with ``child(...)``."""

from duro import step, workflow

from .models import Payment

PRICES_CENTS = {"lamp": 4_500, "bulb": 350, "shade": 1_200}


@step(retries=3, retry_delay="500ms")
async def call_payment_provider(order_id: str, amount_cents: int) -> str:
    # A real app calls its provider here; the result is recorded, so a replay never charges twice.
    return f"pay_{order_id}_{amount_cents}"


@workflow(name="charge_payment")
async def charge_payment(payment: Payment) -> str:
    return await call_payment_provider(payment.order_id, payment.amount_cents)
