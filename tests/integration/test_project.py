"""Project loading: duro.config.py, the convention scan of workflows/, and the workflows list."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from duro import ConfigError, Engine
from duro.definitions._scan import load_project

WORKFLOW = """
from duro import workflow, step
COUNTER = __import__("pathlib").Path(__file__).parent.parent / "imports.log"
with open(COUNTER, "a") as f:
    f.write(__name__ + "\\n")

@step
async def add(x: int) -> int:
    return x + {delta}

@workflow(name="{name}")
async def flow(x: int) -> int:
    return await add(x)
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_convention_scan_imports_every_module_once(tmp_path):
    root = write(
        tmp_path,
        {
            "duro.config.py": "from duro import define_workspace, Limit\n"
            "workspace = define_workspace(limits={'partner-api': Limit(capacity=5, max_hold='10m')})\n",
            "workflows/a.py": WORKFLOW.format(name="alpha", delta=1),
            "workflows/nested/b.py": WORKFLOW.format(name="beta", delta=2)
            + "\nfrom workflows.a import flow as _a\n",
            "workflows/helpers.py": "VALUE = 1\n",
        },
    )
    project = load_project(root)
    assert sorted(spec.name for spec in project.workflows) == ["alpha", "beta"]
    assert project.workspace.limits["partner-api"].capacity == 5
    imports = [line for log in root.rglob("imports.log") for line in log.read_text().split()]
    assert sorted(imports) == ["workflows.a", "workflows.nested.b"]


def test_a_workflows_list_replaces_the_scan_and_marks_serial(tmp_path):
    root = write(
        tmp_path,
        {
            "duro.config.py": "from duro import define_workspace\n"
            "workspace = define_workspace(workflows=[{'path': 'workflows/a.py', 'serial': True}])\n",
            "workflows/a.py": WORKFLOW.format(name="alpha", delta=1),
            "workflows/b.py": WORKFLOW.format(name="beta", delta=2),
        },
    )
    project = load_project(root)
    assert [(s.name, s.serial) for s in project.workflows] == [("alpha", True)]


CONFIG_IMPORTING_THE_PROJECT = """
from duro import define_workspace
from workflows.common import LIMITS
from {settings} import MAX_HOLD

workspace = define_workspace(limits={{name: {{"capacity": n, "max_hold": MAX_HOLD}} for name, n in LIMITS.items()}})
"""


def test_the_config_imports_the_projects_own_modules(tmp_path):
    """``duro.config.py`` may import ``workflows.common`` and a module beside it; the scan then finds
    the module the config imported (one import, not two), and the next project its own."""
    roots = []
    for name, capacity in (("one", 3), ("two", 7)):
        roots.append(
            write(
                tmp_path / name,
                {
                    "duro.config.py": CONFIG_IMPORTING_THE_PROJECT.format(settings=f"settings_{name}"),
                    f"settings_{name}.py": f"MAX_HOLD = '{capacity}m'\n",
                    "workflows/common.py": f"LIMITS = {{'line': {capacity}}}\n"
                    + WORKFLOW.format(name="common_flow", delta=capacity),
                },
            )
        )
    for root, capacity in zip(roots, (3, 7), strict=True):
        project = load_project(root)
        line = project.workspace.limits["line"]
        assert (line.capacity, line.max_hold_ms) == (capacity, capacity * 60_000)
        assert [spec.name for spec in project.workflows] == ["common_flow"]
        assert (root / "imports.log").read_text().split() == ["workflows.common"]


async def test_engines_load_projects_one_after_another(tmp_path):
    one = write(tmp_path / "one", {"workflows/a.py": WORKFLOW.format(name="flow", delta=1)})
    two = write(tmp_path / "two", {"workflows/a.py": WORKFLOW.format(name="flow", delta=100)})
    for root, expected in ((one, 2), (two, 101)):
        async with Engine.from_project(root, database_url=f"sqlite:///{root / 'x.db'}") as engine:
            assert await (await engine.start("flow", 1)).result(timeout="10s") == expected


@pytest.mark.parametrize(
    ("files", "words"),
    [
        (
            {
                "duro.config.py": "from duro import define_workspace, Limit\n"
                "workspace = define_workspace(limits={'calls': Limit(capacity=0, max_hold='1m')})\n"
            },
            ["calls", "capacity"],
        ),
        ({"duro.config.py": "raise RuntimeError('boom')\n"}, ["duro.config.py", "boom"]),
        ({"duro.config.py": "limits = {}\n"}, ["workspace = define_workspace"]),
        ({"workflows/a.py": "import nonexistent_module_xyz\n"}, ["workflows/a.py", "nonexistent_module_xyz"]),
        (
            {
                "workflows/a.py": WORKFLOW.format(name="same", delta=1),
                "workflows/b.py": WORKFLOW.format(name="same", delta=2),
            },
            ["same", "a.py", "b.py"],
        ),
        (
            {
                "duro.config.py": "from duro import define_workspace\n"
                "workspace = define_workspace(workflows=['workflows/missing.py'])\n"
            },
            ["missing.py"],
        ),
    ],
)
def test_project_errors_name_the_file_and_the_field(tmp_path, files, words):
    root = write(tmp_path, files)
    with pytest.raises(ConfigError) as info:
        load_project(root)
    for word in words:
        assert word in str(info.value)


def test_a_missing_project_directory(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_project(tmp_path / "nope")
