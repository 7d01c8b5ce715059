"""The fencing tests' project: no limits, only the workflows under workflows/."""

from duro import define_workspace

workspace = define_workspace()
