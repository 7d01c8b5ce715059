"""Fulfil an order: steps, a child workflow, a durable sleep and a signal from the outside world."""

from duro import child, sleep, step, wait_for_signal, workflow

from .models import Order, Payment, Receipt
from .payments import PRICES_CENTS, charge_payment


@step
def price_order(items: dict[str, int]) -> int:  # a sync step runs in a worker thread
    return sum(PRICES_CENTS.get(sku, 1_000) * qty for sku, qty in items.items())


@step
async def book_courier(order_id: str) -> str:
    return f"trk_{order_id}"


@workflow(name="fulfil_order", version="1")
async def fulfil_order(order: Order) -> Receipt:
    amount = await price_order(order.items)
    payment = await child(charge_payment, Payment(order.id, amount, reference=order.customer))
    await sleep("1s")  # the warehouse's cool-off before booking a courier
    tracking = await book_courier(order.id)
    # Idle (status "suspended") until the courier's webhook calls engine.signal(run_id, "delivered").
    delivered = await wait_for_signal("delivered", timeout="7d")
    return Receipt(order.id, payment, tracking, delivered=bool(delivered))
