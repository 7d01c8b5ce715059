"""Typed inputs and outputs: pydantic models and dataclasses are validated and stored as JSON."""

from dataclasses import dataclass

from pydantic import BaseModel, Field


class Order(BaseModel):
    id: str
    customer: str
    items: dict[str, int] = Field(description="SKU -> quantity")


@dataclass
class Payment:
    order_id: str
    amount_cents: int
    reference: str


@dataclass
class Receipt:
    order_id: str
    payment: str
    tracking: str | None
    delivered: bool
