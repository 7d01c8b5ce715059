"""Chat turns under a per-tenant quota (on the workflow), and the phone lines our telephony provider
lets us hold at once: 20, a call lasting at most 45 minutes."""

from duro import Limit, define_workspace

workspace = define_workspace(limits={"phone-lines": Limit(capacity=20, max_hold="45m")})
