"""The chaos project: two small limits, so their queues are long and busy while workers die.

``max_hold`` is short on purpose: some calls never release their line (``max_hold`` takes it back),
and a slot held by a run that was cancelled comes back within it.
"""

from duro import Limit, define_workspace

workspace = define_workspace(
    limits={
        "lines": Limit(capacity=4, max_hold="5s"),
        "partner-api": Limit(capacity=3, max_hold="4s"),
    }
)
