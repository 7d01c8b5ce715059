"""The workspace: the limits this project's workflows share.

Our partner's API allows 2 sessions at once, and a session never needs more than 10 minutes: a
session that a crashed run never gave back is taken back after that (``max_hold``, required on
purpose). Change a number here and ``duro dev`` reloads it; Studio's Limits screen can also override
capacity and max hold while the server runs.
"""

from duro import Limit, define_workspace

workspace = define_workspace(limits={"partner-api": Limit(capacity=2, max_hold="10m")})
