"""The end-to-end tests' project: a partner API with one session at a time."""

from duro import Limit, define_workspace

workspace = define_workspace(limits={"partner-api": Limit(capacity=1, max_hold="1h")})
