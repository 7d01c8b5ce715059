"""What `pip install duro` gets: the wheel's files, and the extras.

The wheel is built from a copy of the checkout with caches planted in it (as running the template in
place, or the tests, leave them), so what keeps them out is pyproject.toml's own selection, not a
clean tree. A missing extra is simulated in a fresh interpreter by a meta-path finder that refuses to
import its packages, as Python does for a package that is not installed; the dev server, the
client commands and a PostgreSQL store must then say which extra to install, in one line, while
the SDK on SQLite and the commands that need no extra keep working."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("pyproject.toml", "README.md", "sdk", "devserver", "harness", "templates")
CACHES = ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".duro")
TIMEOUT = 120

DEV = "starlette,uvicorn,watchfiles,sse_starlette,httpx"
POSTGRES = "psycopg"
NO_EXTRAS = f"{DEV},{POSTGRES}"

# Runs `duro` (or, with `-c`, a script) after refusing every import of the packages named in
# argv[1]; first it checks that they are refused indeed.
WITHOUT = """\
import sys
from importlib.abc import MetaPathFinder

blocked = set(sys.argv[1].split(","))


class NotInstalled(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
for name in blocked:
    try:
        __import__(name)
    except ModuleNotFoundError:
        pass
    else:
        raise SystemExit(f"{name} was imported: the simulation is broken")
if sys.argv[2] == "-c":
    script, sys.argv = sys.argv[3], ["-c"]
    exec(compile(script, "<script>", "exec"), {"__name__": "__main__"})
else:
    from duro_devserver.cli import main

    main(sys.argv[2:], prog_name="duro")
"""

HELLO = """\
from duro import step, workflow


@step
async def greet(name: str) -> str:
    return f"hello {name}"


@workflow
async def hello(name: str) -> str:
    return await greet(name)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    src = tmp_path_factory.mktemp("checkout")
    for name in SHIPPED:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns(*CACHES, "*.pyc"))
        else:
            shutil.copy2(REPO / name, src / name)
    for folder in (src / "templates" / "project", src / "sdk" / "duro"):
        for cache in CACHES:
            (folder / cache).mkdir()
            (folder / cache / "planted.db").write_bytes(b"\0")
        (folder / "stray.pyc").write_bytes(b"\0")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            out,
            src,
        ],
        check=True,
        timeout=TIMEOUT,
        capture_output=True,
    )
    (built,) = out.glob("duro-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_holds_the_three_packages_and_their_py_typed(wheel):
    names = set(wheel.namelist())
    for package in ("duro", "duro_devserver", "duro_harness"):
        assert f"{package}/__init__.py" in names
        assert f"{package}/py.typed" in names
    assert "duro/store/_sql.py" in names
    assert "duro_devserver/studio/index.html" in names


def test_the_wheel_holds_the_project_template_that_duro_init_copies(wheel):
    template = REPO / "templates" / "project"
    expected = {
        f"duro_devserver/_templates/project/{path.relative_to(template).as_posix()}"
        for path in template.rglob("*")
        if path.is_file() and not set(path.relative_to(template).parts) & {*CACHES} and path.suffix != ".pyc"
    }
    shipped = {name for name in wheel.namelist() if name.startswith("duro_devserver/_templates/")}
    assert "duro_devserver/_templates/project/duro.config.py" in shipped
    assert shipped == expected


def test_the_wheel_holds_no_caches(wheel):
    stray = [
        name
        for name in wheel.namelist()
        if name.endswith((".pyc", ".pyo")) or set(name.split("/")) & set(CACHES) or "planted" in name
    ]
    assert stray == []


def test_the_wheel_declares_the_extras_the_command_and_the_pytest_plugin(wheel):
    info = next(name for name in wheel.namelist() if name.endswith(".dist-info/METADATA"))
    metadata = wheel.read(info).decode()
    requires = [
        line.removeprefix("Requires-Dist: ")
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    base = {r.split(">")[0].split("[")[0] for r in requires if ";" not in r}
    assert base == {
        "click",
        "pydantic",
        "sqlmodel",
        "sqlalchemy",
        "croniter",
        "freezegun",
        "prometheus-client",
    }
    assert "psycopg[binary]>=3.2; extra == 'postgres'" in requires
    assert "opentelemetry-api>=1.20; extra == 'otel'" in requires
    assert {r.split(">")[0] for r in requires if r.endswith("extra == 'dev'")} == {
        "starlette",
        "uvicorn",
        "watchfiles",
        "sse-starlette",
        "httpx",
    }
    entry_points = wheel.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert "duro = duro_devserver.cli:main" in entry_points
    assert "[pytest11]\nduro = duro_harness.plugin" in entry_points


# -- missing extras ---------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "workflows").mkdir(parents=True)
    (root / "duro.config.py").write_text(
        "from duro import define_workspace\n\nworkspace = define_workspace()\n"
    )
    (root / "workflows" / "__init__.py").write_text("")
    (root / "workflows" / "hello.py").write_text(HELLO)
    return root


def without(blocked: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DURO_"))}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT, blocked, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


@pytest.mark.parametrize(
    "args, command",
    [
        (["dev"], "dev"),
        (["serve"], "serve"),
        (["runs", "list"], "runs list"),
        (["start", "hello"], "start"),
        (["limits", "slots", "partner-api"], "limits slots"),
    ],
    ids=["dev", "serve", "runs list", "start", "limits slots"],
)
def test_a_command_that_needs_the_dev_extra_names_it_in_one_line(args, command, project):
    done = without(DEV, *args, cwd=project)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"error: duro {command} needs the dev extra: pip install 'duro[dev]'\n"


def test_without_any_extra_the_sdk_runs_a_workflow_on_sqlite_and_init_and_help_work(project, tmp_path):
    done = without(NO_EXTRAS, "run", "hello", "--input", '"ann"', "--project", str(project), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert 'result: "hello ann"' in done.stdout
    done = without(NO_EXTRAS, "init", str(tmp_path / "new"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "new" / "duro.config.py").is_file()
    done = without(NO_EXTRAS, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "dev" in done.stdout


def test_a_postgresql_url_without_the_postgres_extra_is_a_duro_error_naming_it(tmp_path):
    script = (
        "import asyncio, duro\n"
        "async def main():\n"
        "    async with duro.Engine('postgresql+psycopg://duro:secret@127.0.0.1:1/duro') as engine:\n"
        "        await engine.start('nothing', None)\n"
        "try:\n"
        "    asyncio.run(main())\n"
        "except duro.DuroError as err:\n"
        "    print(type(err).__name__, err)\n"
    )
    done = without(POSTGRES, "-c", script, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "DuroError PostgreSQL needs the postgres extra: pip install 'duro[postgres]'\n"


def test_a_command_on_a_postgresql_store_without_the_postgres_extra_names_it(project):
    url = "postgresql://duro:secret@127.0.0.1:1/duro"
    done = without(POSTGRES, "run", "hello", "--database-url", url, cwd=project)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "error: PostgreSQL needs the postgres extra: pip install 'duro[postgres]'\n"


def test_make_dev_installs_what_the_dev_server_needs_and_no_test_tool(tmp_path: Path):
    """`make dev` builds its virtual environment with the dev server's extra alone: no test runner,
    browser driver, type checker or API fuzzer (`make test` adds those)."""
    venv = tmp_path / "venv"
    subprocess.run(
        ["make", "--no-print-directory", "dev-env", f"VENV={venv}", f"PYTHON={sys.executable}"],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=600,
    )
    listed = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m; print('\\n'.join(d.metadata['Name'].lower() for d in m.distributions()))",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    ).stdout.split()
    assert {"duro", "starlette", "uvicorn", "watchfiles", "httpx"} <= set(listed), listed
    test_only = {"playwright", "mypy", "schemathesis", "pytest", "hypothesis", "ruff", "fastapi"}
    assert not test_only & set(listed), sorted(test_only & set(listed))
    help_text = subprocess.run(
        [str(venv / "bin" / "duro"), "dev", "--help"],
        check=True,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    ).stdout
    assert "--port" in help_text
