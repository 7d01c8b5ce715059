"""`duro init`: the scaffold is written whole or not at all, and the project it makes passes its own tests."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib.resources import files
from pathlib import Path

import pytest
from click.testing import CliRunner

from duro import DuroError
from duro_devserver.cli import main
from duro_devserver.scaffold import PLACEHOLDER, scaffold, template_dir, template_files

REPO = Path(__file__).resolve().parents[2]
EXPECTED = [
    ".gitignore",
    "README.md",
    "duro.config.py",
    "pyproject.toml",
    "tests/test_sync_orders.py",
    "tests/test_welcome.py",
    "workflows/__init__.py",
    "workflows/sync_orders.py",
    "workflows/welcome.py",
]


def tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_init_writes_the_template_and_says_what_to_run_next(tmp_path):
    target = tmp_path / "shop"
    result = CliRunner().invoke(main, ["init", str(target)])
    assert result.exit_code == 0, result.output
    assert sorted(tree(target)) == EXPECTED
    assert all(f"  {name}\n" in result.stdout for name in EXPECTED)
    assert f"cd {target}" in result.stdout and "duro dev" in result.stdout and "pytest" in result.stdout
    readme = (target / "README.md").read_text()
    assert readme.startswith("# shop\n") and "http://127.0.0.1:8787" in readme
    assert not any(PLACEHOLDER.encode() in content for content in tree(target).values())
    assert ".duro/" in (target / ".gitignore").read_text().splitlines()


def test_name_option_and_init_in_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".git").mkdir()  # `git init` first is fine: .git alone does not make a folder "not empty"
    result = CliRunner().invoke(main, ["init", ".", "--name", "Order sync"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "README.md").read_text().startswith("# Order sync\n")
    assert "cd " not in result.stdout  # already there


def test_a_non_empty_directory_is_refused_and_left_as_it_was(tmp_path):
    target = tmp_path / "mine"
    (target / "workflows").mkdir(parents=True)
    (target / "README.md").write_text("my notes\n")
    before = tree(target)
    result = CliRunner().invoke(main, ["init", str(target)])
    assert result.exit_code == 2 and result.stdout == ""
    assert (
        result.stderr.startswith("error: ")
        and "is not empty" in result.stderr
        and "README.md" in result.stderr
    )
    assert tree(target) == before and sorted(p.name for p in target.iterdir()) == ["README.md", "workflows"]


def test_a_file_in_the_way_is_refused(tmp_path):
    (tmp_path / "notes").write_text("x")
    result = CliRunner().invoke(main, ["init", str(tmp_path / "notes")])
    assert result.exit_code == 2 and "is not a directory" in result.stderr
    assert (tmp_path / "notes").read_text() == "x"


def test_a_failed_write_keeps_nothing(tmp_path):
    (tmp_path / "notes").write_text("x")  # a file where a parent folder should be: the first mkdir fails
    with pytest.raises(DuroError, match="nothing was kept"):
        scaffold(tmp_path / "notes" / "shop")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]


def test_a_bad_name_is_refused_before_anything_is_written(tmp_path):
    result = CliRunner().invoke(main, ["init", str(tmp_path / "shop"), "--name", "two\nlines"])
    assert result.exit_code == 2 and "--name" in result.stderr
    assert not (tmp_path / "shop").exists()


def test_caches_next_to_a_template_are_not_copied(tmp_path):
    template = tmp_path / "template"
    (template / "workflows" / "__pycache__").mkdir(parents=True)
    (template / "workflows" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (template / ".duro").mkdir()
    (template / ".duro" / "dev.db").write_bytes(b"\0")
    (template / "workflows" / "a.py").write_text("# {{project_name}}\n")
    assert [(str(path), text) for path, text in template_files(template)] == [
        ("workflows/a.py", "# {{project_name}}\n")
    ]


def test_the_template_found_is_the_repositorys_project_template():
    # a source checkout (the editable install) reads it in place; an installed wheel carries a copy
    found = template_dir()
    assert Path(str(found)) in (
        REPO / "templates" / "project",
        Path(str(files("duro_devserver"))) / "_templates" / "project",
    )
    assert list(template_files(found)) == list(template_files(REPO / "templates" / "project"))
    assert [str(path) for path, _ in template_files(found)] == EXPECTED


def test_the_repositorys_own_test_run_does_not_collect_the_template():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert not any(path.startswith("templates") for path in config["testpaths"])


def test_the_scaffolded_project_passes_its_own_tests(tmp_path):
    target = tmp_path / "shop"
    assert CliRunner().invoke(main, ["init", str(target)]).exit_code == 0
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=target,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr  # (no test collected would be 5)
    assert " passed" in done.stdout and "warning" not in done.stdout, done.stdout
