from duro import define_workspace

workspace = define_workspace()
