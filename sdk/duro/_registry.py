"""The workflows an engine knows: registered by name, each with its code (or none: remote)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._decorators import WorkflowFunction, workflow_spec
from ._definitions import Concurrency, WorkflowSpec, function_workflow_spec
from ._errors import DuroError
from ._serde import Codec


class Registry:
    """Workflow specs by name. A later registration of a name replaces it."""

    def __init__(self) -> None:
        self._specs: dict[str, WorkflowSpec] = {}

    def register(
        self,
        name: Any,
        version: str | None = None,
        fn: Callable[..., Any] | None = None,
        *,
        concurrency: Concurrency | None = None,
        on_event: str | None = None,
    ) -> WorkflowSpec:
        """``register(decorated_workflow)``, or ``register(name, version, fn, concurrency=...)`` for a
        plain ``async def``."""
        if fn is None:
            spec = name if isinstance(name, WorkflowSpec) else workflow_spec(name)
            if spec is None:
                raise DuroError(
                    f"cannot register {name!r}: pass a @workflow, a Workflow subclass, or "
                    f"register(name, version, fn)"
                )
        else:
            if not isinstance(name, str) or not name:
                raise DuroError(f"workflow name must be a non-empty string, got {name!r}")
            target = fn._fn if isinstance(fn, WorkflowFunction) else fn
            spec = function_workflow_spec(target, name, version or "1", concurrency, on_event)
        self._specs[spec.name] = spec
        return spec

    def register_remote(
        self,
        name: str,
        version: str = "1",
        *,
        concurrency: Concurrency | None = None,
        on_event: str | None = None,
    ) -> WorkflowSpec:
        """A workflow whose code runs in another process sharing the store: started and read here
        (input stored as JSON), never executed."""
        if not isinstance(name, str) or not name:
            raise DuroError(f"workflow name must be a non-empty string, got {name!r}")
        spec = WorkflowSpec(
            name=name,
            version=str(version),
            invoke=None,
            input=Codec(None),
            output=Codec(None),
            concurrency=concurrency,
            on_event=on_event,
        )
        self._specs[name] = spec
        return spec

    @property
    def specs(self) -> dict[str, WorkflowSpec]:
        return dict(self._specs)

    def get(self, name: str) -> WorkflowSpec | None:
        return self._specs.get(name)

    def spec_for(self, wf: Any) -> WorkflowSpec:
        """The registered spec for a workflow object or name (objects register on first use)."""
        if isinstance(wf, str):
            spec = self._specs.get(wf)
            if spec is None:
                known = ", ".join(sorted(self._specs)) or "none"
                raise DuroError(
                    f"unknown workflow {wf!r} (registered: {known}); put it under workflows/, "
                    f"or call engine.register(...) / engine.register_remote(...)"
                )
            return spec
        spec = wf if isinstance(wf, WorkflowSpec) else workflow_spec(wf)
        if spec is None:
            raise DuroError(f"{wf!r} is not a workflow: decorate it with @workflow or pass its name")
        return self._specs.get(spec.name) or self.register(spec)

    def is_serial(self, name: str) -> bool:
        spec = self._specs.get(name)
        return spec is not None and spec.serial

    def serial_names(self) -> list[str]:
        """Workflows whose runs start one at a time, oldest first (``"serial": True`` in the config)."""
        return [name for name, spec in self._specs.items() if spec.serial]

    def local_names(self) -> list[str]:
        """Workflows whose code this process has (it executes their runs)."""
        return [name for name, spec in self._specs.items() if not spec.remote]
