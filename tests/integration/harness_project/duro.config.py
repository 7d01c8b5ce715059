from duro import Limit, define_workspace

workspace = define_workspace(limits={"partner-api": Limit(capacity=2, max_hold="10m")})
