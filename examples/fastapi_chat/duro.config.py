"""Chat turns per tenant, started by a FastAPI app: the quota lives on the workflow; no limits here."""

from duro import define_workspace

workspace = define_workspace()
