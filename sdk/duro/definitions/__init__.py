"""Workflows and steps as specs, ``@workflow`` and ``@step``, the registry of an engine's
workflows, the workspace (``define_workspace``: limits, rates, retention) and the project scanner."""
