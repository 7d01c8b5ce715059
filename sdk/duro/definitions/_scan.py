"""Project loading: ``duro.config.py`` at the root, then the workflows (convention scan or list).

Every entry point (``make dev``, the harness, the dev server, workers) loads a project this way.
The project root goes first on ``sys.path`` before ``duro.config.py`` runs, so the config, like the
workflows, may import the project's own modules (``from workflows.common import LIMITS``, a
``settings.py`` beside it). Modules under ``workflows/`` are imported as the package ``workflows``,
so workflow files may import each other either way (``from workflows.common import x`` or ``from
.common import x``).

A project's workflow modules are imported once per process: loading the same project again (the
harness does for every test) takes the modules already imported, so a test that imports
``workflows.provider`` at its top holds the very module the engine runs, and a ``monkeypatch`` of it
reaches the steps. Loading another project puts the first one's modules aside (and back when it is
loaded again); a module whose file changed since it was imported, or ``fresh=True`` (the dev
server's hot reload), imports the project's modules anew.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType

from .._errors import ConfigError
from ._config import Workspace, define_workspace
from ._definitions import WorkflowSpec, workflow_spec

CONFIG_FILE = "duro.config.py"
WORKFLOWS_DIR = "workflows"


@dataclass
class Project:
    root: Path
    workspace: Workspace
    workflows: list[WorkflowSpec] = field(default_factory=list)


def load_config(root: Path) -> Workspace:
    """The workspace declared by ``root/duro.config.py``; an empty one when the file is absent."""
    path = root / CONFIG_FILE
    if not path.exists():
        return define_workspace()
    spec = importlib.util.spec_from_file_location("duro_project_config", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ConfigError:
        raise
    except Exception as err:
        raise ConfigError(f"{path} failed to load: {type(err).__name__}: {err}") from err
    workspace = getattr(module, "workspace", None)
    if not isinstance(workspace, Workspace):
        raise ConfigError(f"{path} must set `workspace = define_workspace(...)`; found {workspace!r}")
    return workspace


def _package_modules() -> dict[str, ModuleType]:
    return {n: m for n, m in sys.modules.items() if n == WORKFLOWS_DIR or n.startswith(WORKFLOWS_DIR + ".")}


def _root_of(package: ModuleType) -> Path | None:
    """The project root whose ``workflows/`` directory ``package`` was imported from."""
    for entry in getattr(package, "__path__", None) or ():
        return Path(entry).resolve().parent
    return None


def _mtime(module: ModuleType) -> int | None:
    file = getattr(module, "__file__", None)
    try:
        return None if file is None else Path(file).stat().st_mtime_ns
    except OSError:
        return None


# Each project's imported workflow modules, by root, with their files' modification times as
# imported: a project loaded again gets the same module objects unless a file changed since.
_IMPORTED: dict[Path, dict[str, tuple[ModuleType, int | None]]] = {}


def _use_workflows_package(root: Path, fresh: bool) -> None:
    """Make ``sys.modules``' ``workflows`` package the one of ``root``: kept as it is if it is that
    project's and unchanged, put back if it was put aside, otherwise dropped to be imported anew."""
    current = _package_modules()
    package = current.get(WORKFLOWS_DIR)
    owner = None if package is None else _root_of(package)
    if owner is not None and owner != root:  # another project's: aside, for its next load
        _IMPORTED[owner] = {name: (module, _mtime(module)) for name, module in current.items()}
    stored = _IMPORTED.get(root, {})
    if owner == root:  # imported already, by the app or by an earlier load: what is there now wins
        if stored.get(WORKFLOWS_DIR, (None, None))[0] is not package:
            stored = {}  # the app imported the package anew since: that generation, not the older
        stored = {
            **stored,
            **{
                n: stored[n] if n in stored and stored[n][0] is m else (m, _mtime(m))
                for n, m in current.items()
            },
        }
    edited = any(_mtime(module) != mtime for module, mtime in stored.values())
    for name in current:
        del sys.modules[name]
    if fresh or edited or not stored:
        _IMPORTED.pop(root, None)
    else:
        sys.modules.update({name: module for name, (module, _) in stored.items()})
    importlib.invalidate_caches()


def _remember_workflows_package(root: Path) -> None:
    known = _IMPORTED.setdefault(root, {})
    for name, module in _package_modules().items():
        if name not in known or known[name][0] is not module:
            known[name] = (module, _mtime(module))


# The project root this module put on sys.path last: loading another project takes it off again, so
# the old project's `workflows` package cannot shadow the new one's.
_ROOTS_ADDED: list[str] = []


def _put_root_first(root: Path) -> None:
    for added in _ROOTS_ADDED:
        while added in sys.path:
            sys.path.remove(added)
    _ROOTS_ADDED[:] = [str(root)]
    sys.path.insert(0, str(root))


def _module_name(root: Path, path: Path) -> str:
    relative = path.resolve().relative_to(root.resolve()).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import(root: Path, path: Path) -> ModuleType:
    if not path.exists():
        raise ConfigError(f"workflow file {path} does not exist; fix the `workflows` list in {CONFIG_FILE}")
    try:
        name = _module_name(root, path)
        return importlib.import_module(name)
    except ConfigError:
        raise
    except ValueError:
        raise ConfigError(f"workflow file {path} is outside the project root {root}") from None
    except Exception as err:
        raise ConfigError(f"workflow file {path} failed to import: {type(err).__name__}: {err}") from err


def _workflows_in(module: ModuleType) -> list[WorkflowSpec]:
    found = []
    for value in vars(module).values():
        spec = workflow_spec(value) if not isinstance(value, ModuleType) else None
        if spec is not None and spec.source == module.__name__:
            found.append(spec)
    return found


def load_project(root: str | Path = ".", *, fresh: bool = False) -> Project:
    """Load ``duro.config.py`` and the workflow modules (imported once per process: see the module's
    docstring; ``fresh=True`` imports them anew); returns the specs found."""
    root = Path(root).resolve()
    if not root.is_dir():
        raise ConfigError(f"project directory {root} does not exist")
    _use_workflows_package(root, fresh)
    _put_root_first(root)
    workspace = load_config(root)

    if workspace.workflows is None:
        directory = root / WORKFLOWS_DIR
        entries = (
            [(path, False) for path in sorted(directory.rglob("*.py")) if "__pycache__" not in path.parts]
            if directory.is_dir()
            else []
        )
    else:
        entries = [(root / entry.path, entry.serial) for entry in workspace.workflows]

    specs: dict[tuple[str, str], WorkflowSpec] = {}  # versions of one name coexist
    origin: dict[tuple[str, str], Path] = {}
    for path, serial in entries:
        module = _import(root, path)
        for spec in _workflows_in(module):
            key = (spec.name, spec.version)
            if key in specs and specs[key] is not spec:
                raise ConfigError(
                    f"two workflows are named {spec.name!r} with version {spec.version!r}: in "
                    f"{origin[key]} and in {path}; give one of them another name= or version="
                )
            specs[key] = replace(spec, serial=True) if serial else spec
            origin[key] = path
    _remember_workflows_package(root)
    return Project(root=root, workspace=workspace, workflows=list(specs.values()))
