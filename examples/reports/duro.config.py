"""The partner's API allows 5 sessions at once; a session never needs more than 10 minutes."""

from duro import Limit, define_workspace

workspace = define_workspace(limits={"partner-api": Limit(capacity=5, max_hold="10m")})
