from duro import Limit, define_workspace

workspace = define_workspace(
    limits={
        "partner-api": Limit(capacity=2, max_hold="10m"),
        "voice-calls": {"capacity": 1, "max_hold": "45m"},
    }
)
