"""A regular (non-editable) wheel carries the registry and assets, and the installed code
finds them there: `pip install .` once left models.yaml out, and `ember catalog` failed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_built_wheel_carries_models_yaml_and_assets_and_uses_them(tmp_path: Path):
    # built from a copy: an in-tree build would leave build/ and *.egg-info in the checkout
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".*", "build", "dist", "*.egg-info", "__pycache__", "tests", "benchmarks", "docs"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist"), str(source)], check=True)
    wheel = next((tmp_path / "dist").glob("ember-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        assert z.read("app/_data/models.yaml") == (ROOT / "models.yaml").read_bytes()
        assets = [p for p in (ROOT / "assets").rglob("*") if p.is_file()]
        assert any(p.suffix == ".svg" for p in assets)  # the icon, in a folder of its own
        for asset in assets:
            name = asset.relative_to(ROOT).as_posix()
            assert z.read(f"app/_data/{name}") == asset.read_bytes()
        z.extractall(tmp_path / "site")

    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "EMBER_HOME": str(tmp_path)}
    env.pop("EMBER_REGISTRY", None)
    out = subprocess.run(
        [sys.executable, "-c", "from app import config, resources; from app.registry import "
         "load_registry; print(resources.registry_file()); print(resources.asset('style-dark"
         ".qss').is_file()); print(len(load_registry().models))"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.split()
    from app.registry import load_registry

    assert out == [str(tmp_path / "site" / "app" / "_data" / "models.yaml"), "True",
                   str(len(load_registry(ROOT / "models.yaml").models))]
