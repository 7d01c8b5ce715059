"""The partner API refuses more than 5 open sessions per account, and we may hold 20 in all."""

from duro import Limit, define_workspace

workspace = define_workspace(limits={"partner-api": Limit(capacity=20, per_key=5, max_hold="30m")})
