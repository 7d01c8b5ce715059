"""`duro init`: copy the project template (``templates/project`` in the repository) into a new directory.

Where the template is found, first match wins:

1. ``duro_devserver/_templates/project`` inside the installed package: building a wheel copies the
   repository's ``templates/`` there, so an installed duro needs no source checkout;
2. ``<repository>/templates/project``, two folders above this package: a source checkout, which is
   what the editable install (``pip install -e .``, as ``make test`` does) imports from. Editing the
   template there takes effect at once, with no reinstall.

Both are read through ``importlib.resources`` traversables, so a zipped install works as well.

Files are copied as text; ``{{project_name}}`` in them becomes the project's name (a plain
``str.replace``: there is no template engine). Caches (``__pycache__``, ``.pytest_cache``, ``.duro``)
that running the template in place may leave are not copied.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath

from duro import DuroError

TEMPLATE = "project"
PLACEHOLDER = "{{project_name}}"
_NOT_COPIED = {"__pycache__", ".pytest_cache", ".ruff_cache", ".duro", ".DS_Store"}
_IGNORED_IN_TARGET = {".git"}  # `git init` then `duro init .` is fine: nothing of git's is touched


def template_dir() -> Traversable:
    """The project template: the copy shipped inside the package, else the source checkout's."""
    packaged = resources.files("duro_devserver").joinpath("_templates", TEMPLATE)
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "templates" / TEMPLATE
    if checkout.is_dir():
        return checkout
    raise DuroError(
        f"the project template is missing from this installation (looked for {packaged} and "
        f"{checkout}); reinstall duro"
    )


def template_files(template: Traversable | None = None) -> Iterator[tuple[PurePosixPath, str]]:
    """Every file of the template as ``(relative path, text)``, in a stable order."""
    root = template if template is not None else template_dir()

    def walk(folder: Traversable, prefix: PurePosixPath) -> Iterator[tuple[PurePosixPath, str]]:
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.name in _NOT_COPIED or entry.name.endswith(".pyc"):
                continue
            if entry.is_dir():
                yield from walk(entry, prefix / entry.name)
            else:
                yield prefix / entry.name, entry.read_text(encoding="utf-8")

    yield from walk(root, PurePosixPath())


def project_name(target: Path, name: str | None = None) -> str:
    """``name`` checked (one line, not blank), or the target directory's name."""
    chosen = (name if name is not None else Path(target).resolve().name).strip()
    if not chosen or any(not ch.isprintable() for ch in chosen):
        raise DuroError(f"the project name {chosen!r} must be one line of printable text; pass --name NAME")
    return chosen


def _check_target(target: Path) -> None:
    if not target.exists():
        return
    if not target.is_dir():
        raise DuroError(f"{target} exists and is not a directory: choose a new directory for the project")
    present = sorted(entry.name for entry in target.iterdir() if entry.name not in _IGNORED_IN_TARGET)
    if present:
        shown = ", ".join(present[:5]) + (", ..." if len(present) > 5 else "")
        raise DuroError(
            f"{target} is not empty (it holds {shown}): duro init never writes over your "
            f"files; choose a new or empty directory"
        )


def _make_dirs(folder: Path, made: list[Path]) -> None:
    """Create ``folder`` and its missing parents, noting each one created (outermost first)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir()
        made.append(path)


def _undo(files: list[Path], folders: list[Path]) -> None:
    for path in reversed(files):
        path.unlink(missing_ok=True)
    for folder in reversed(folders):
        try:
            folder.rmdir()  # never a tree removal: anything someone else put there stays
        except OSError:
            pass


def scaffold(target: Path, name: str | None = None) -> list[Path]:
    """Copy the project template into ``target`` (created if missing) and return the files written.

    ``target`` must not exist, or be empty (a ``.git`` folder alone is fine). ``name`` (default: the
    directory's name) replaces ``{{project_name}}`` in the template. A :class:`DuroError` says what is
    wrong and then nothing has been written: no file is ever overwritten, and a failure halfway
    (a full disk, a file appearing meanwhile) removes what this call had created.
    """
    target = Path(target)
    name = project_name(target, name)
    _check_target(target)
    files = list(template_files())
    written: list[Path] = []
    made: list[Path] = []
    path = target
    try:
        _make_dirs(target, made)
        for relative, text in files:
            path = target.joinpath(*relative.parts)
            _make_dirs(path.parent, made)
            with path.open("x", encoding="utf-8", newline="") as out:  # "x": fails rather than overwrite
                written.append(path)
                out.write(text.replace(PLACEHOLDER, name))
    except OSError as err:
        _undo(written, made)
        reason = "it already exists" if isinstance(err, FileExistsError) else (err.strerror or str(err))
        raise DuroError(
            f"could not write {path}: {reason}; nothing was kept, the directory is as it was"
        ) from err
    return written
