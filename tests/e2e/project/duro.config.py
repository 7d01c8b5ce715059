"""The end-to-end tests' project: a partner API with one session at a time and 2 calls a minute."""

from duro import Limit, Rate, define_workspace

workspace = define_workspace(
    limits={"partner-api": Limit(capacity=1, max_hold="1h")},
    rates={"partner-calls": Rate(limit=2, per="1m")},
)
