"""Which plan each tenant is on, and how many chat turns each plan may run at once."""

PLAN_TURNS = {"free": 1, "team": 3, "enterprise": 8}
TENANT_PLANS = {"acme": "enterprise", "globex": "team", "initech": "free"}


async def turns_for(key: str) -> int:
    """The quota's limit function: called with the key ("tenant:acme") at every start.
    A real app reads the tenant's plan from its database here."""
    tenant = key.removeprefix("tenant:")
    return PLAN_TURNS[TENANT_PLANS.get(tenant, "free")]
