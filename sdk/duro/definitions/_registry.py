"""The workflows an engine knows: registered by name and version, each with its code (or none:
remote). Several versions of one name coexist: a run executes on the code of its recorded version,
and a start takes the newest version (versions compare as numbers where they are numbers: "10"
is newer than "9", "1.10" than "1.9") unless it names one."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .._errors import DuroError
from .._serde import Codec
from ._decorators import WorkflowFunction, workflow_spec
from ._definitions import Concurrency, WorkflowSpec, function_workflow_spec


def version_order(version: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key of a version: runs of digits compare as numbers, the rest as text."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.findall(r"\d+|\D+", version))


class Registry:
    """Workflow specs by name and version. A later registration of a (name, version) replaces it."""

    def __init__(self) -> None:
        self._specs: dict[str, WorkflowSpec] = {}  # the newest version of each name
        self._versions: dict[str, dict[str, WorkflowSpec]] = {}
        # the workflows whose code this process has (it executes their runs) and their (workflow,
        # version) pairs (the runs it may claim); tuples, so a claim in the store thread reads a stable copy
        self.local_names: tuple[str, ...] = ()
        self.local_versions: tuple[tuple[str, str], ...] = ()

    def _put(self, spec: WorkflowSpec) -> WorkflowSpec:
        versions = self._versions.setdefault(spec.name, {})
        versions[spec.version] = spec
        self._specs[spec.name] = versions[max(versions, key=version_order)]
        if not spec.remote:
            if spec.name not in self.local_names:
                self.local_names += (spec.name,)
            if (pair := (spec.name, spec.version)) not in self.local_versions:
                self.local_versions += (pair,)
        return spec

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
        return self._put(spec)

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
        return self._put(spec)

    @property
    def specs(self) -> dict[str, WorkflowSpec]:
        return dict(self._specs)

    def get(self, name: str, version: str | None = None) -> WorkflowSpec | None:
        """The spec of ``name`` at ``version`` (``None``: its newest)."""
        if version is None:
            return self._specs.get(name)
        return self._versions.get(name, {}).get(version)

    def versions(self, name: str) -> list[str]:
        """The versions of ``name`` registered here, oldest first."""
        return sorted(self._versions.get(name, {}), key=version_order)

    def spec_for(self, wf: Any, version: str | None = None) -> WorkflowSpec:
        """The registered spec for a workflow object or name (objects register on first use), at
        ``version`` (``None``: a name's newest version, an object's own)."""
        if isinstance(wf, str):
            spec = self.get(wf, version)
            if spec is None and wf in self._specs:
                known = ", ".join(self.versions(wf))
                raise DuroError(
                    f"workflow {wf!r} has no version {version!r} here (registered versions: {known}); "
                    f"register that version's code beside the others, or start without version="
                )
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
        if version is not None and version != spec.version:
            return self.spec_for(spec.name, version)
        return self.get(spec.name, spec.version) or self.register(spec)

    def is_serial(self, name: str) -> bool:
        spec = self._specs.get(name)
        return spec is not None and spec.serial

    def serial_names(self) -> list[str]:
        """Workflows whose runs start one at a time, oldest first (``"serial": True`` in the config)."""
        return [name for name, spec in self._specs.items() if spec.serial]
