"""Ship templates/ (what `duro init` scaffolds) inside the wheel, as duro_devserver/_templates.
Everything else is in pyproject.toml; an editable install reads the checkout's templates/."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithTemplates(build_py):
    def run(self) -> None:
        super().run()
        if not getattr(self, "editable_mode", False):
            shutil.copytree(Path(__file__).parent / "templates", Path(self.build_lib) / "duro_devserver" / "_templates",
                            dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".duro"))


setup(cmdclass={"build_py": BuildPyWithTemplates})
