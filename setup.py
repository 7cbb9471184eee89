"""The one build step pyproject.toml cannot express: the wheel carries the registry
(`models.yaml`) and `assets/`, which the design keeps at the repository's top, as package data
in `app/_data/` (app.resources finds them there). An editable install reads them from the
source tree instead, so nothing is copied then."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
DATA = ("models.yaml", "assets")


class build_py_with_data(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "app" / "_data"
        target.mkdir(parents=True, exist_ok=True)
        for name in DATA:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, target / name, dirs_exist_ok=True)
            else:
                shutil.copy2(source, target / name)


setup(cmdclass={"build_py": build_py_with_data})
