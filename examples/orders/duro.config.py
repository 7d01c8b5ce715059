"""The orders example: one limit (declared now; the slot runtime arrives with limits)."""

from duro import Limit, define_workspace

workspace = define_workspace(
    limits={"couriers": Limit(capacity=3, max_hold="2h")},
)
