"""Chat turns per tenant: quotas live on the workflow; no limits are needed here."""

from duro import define_workspace

workspace = define_workspace()
