"""What users read cites only what they have: README.md, docs/, templates/, examples/ and the
docstrings of duro's packages name no design file outside the repository and no issue numbers,
their relative links lead to files that exist, and docs/install.md lists every extra and base
dependency that pyproject.toml declares."""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("sdk/duro", "devserver/duro_devserver", "harness/duro_harness")
TEXT_SUFFIXES = {".md", ".py", ".toml", ".txt", ".html", ".js", ".json", ".cfg", ".ini", ".yml", ".yaml"}
# the contract the code was built to, which users do not have; and "issue 24", "issues 13", "issue #7"
NOT_THEIRS = re.compile(r"\bDESIGN\.md\b|\bissues? #?\d+", re.IGNORECASE)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _files(*roots: str) -> Iterator[Path]:
    for name in roots:
        path = REPO / name
        if path.is_file():
            yield path
            continue
        for file in sorted(path.rglob("*")):
            if file.is_file() and file.suffix in TEXT_SUFFIXES and "__pycache__" not in file.parts:
                yield file


def _user_text() -> Iterator[tuple[str, str]]:
    """(where, text) for every user-facing text: whole files of the docs, templates and examples,
    and every module, class and function docstring of the packages."""
    for file in _files("README.md", "docs", "templates", "examples"):
        yield str(file.relative_to(REPO)), file.read_text(encoding="utf-8")
    for package in PACKAGES:
        for file in _files(package):
            if file.suffix != ".py":
                continue
            tree = ast.parse(file.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                    doc = ast.get_docstring(node, clean=False)
                    if doc:
                        yield f"{file.relative_to(REPO)}: {getattr(node, 'name', 'module')}", doc


def test_the_scan_reads_the_docs_and_the_docstrings():
    """The test below passes because there is nothing to find, not because it reads nothing."""
    where = [w for w, _ in _user_text()]
    assert "README.md" in where and "docs/install.md" in where
    assert any(w.startswith("sdk/duro/limits/_acquire.py: acquire_slot") for w in where)
    assert any(w.startswith("examples/") for w in where) and any(w.startswith("templates/") for w in where)
    assert NOT_THEIRS.search("see DESIGN.md") and NOT_THEIRS.search("fixed in issue 24")
    assert NOT_THEIRS.search("Issues 13") and not NOT_THEIRS.search("tissue 3, the issue of a slot")


def test_user_facing_text_cites_no_design_file_and_no_issue_numbers():
    found = [f"{where}: {m.group()!r}" for where, text in _user_text() for m in NOT_THEIRS.finditer(text)]
    assert found == [], "say it in the reader's own terms instead:\n" + "\n".join(found)


def _markdown() -> Iterator[Path]:
    return (file for file in _files("README.md", "docs", "templates", "examples") if file.suffix == ".md")


def test_relative_links_in_the_docs_lead_to_files_that_exist():
    broken = []
    for file in _markdown():
        for match in LINK.finditer(file.read_text(encoding="utf-8")):
            target = match.group(1).split("#", 1)[0]
            if not target or re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # an anchor on the same page, or a URL
            if not (file.parent / target).exists():
                broken.append(f"{file.relative_to(REPO)}: {match.group(1)}")
    assert broken == []


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0]


PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
INSTALL = (REPO / "docs" / "install.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("extra", sorted(PYPROJECT["optional-dependencies"]))
def test_install_md_lists_every_extra_and_what_it_brings(extra):
    rows = [line for line in INSTALL.splitlines() if line.startswith(f"| `duro[{extra}]` |")]
    assert len(rows) == 1, f"docs/install.md needs one table row for duro[{extra}]"
    row = rows[0]
    for requirement in PYPROJECT["optional-dependencies"][extra]:
        name = _requirement_name(requirement)
        if name == "duro":  # another extra of duro's own: named by its name
            for included in re.findall(r"\w+", requirement.split("[", 1)[1]):
                assert included in row, (extra, included)
        else:
            assert name in row, (extra, name)


def test_install_md_lists_the_base_dependencies():
    (row,) = [line for line in INSTALL.splitlines() if line.startswith("| `duro` |")]
    for requirement in PYPROJECT["dependencies"]:
        assert _requirement_name(requirement) in row
