"""Our telephony provider lets us hold 20 calls at once; a call may last at most 45 minutes."""

from duro import Limit, define_workspace

workspace = define_workspace(limits={"voice-calls": Limit(capacity=20, max_hold="45m")})
