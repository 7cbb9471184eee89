"""A backend set for a model in config.toml, with the real model: the Runtime loads with it
(or with the one a request names), and `ember hw` shows it beside the machine's choice."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from app.config import Paths
from app.runtime import Runtime
from app.store import Store
from backends.errors import BackendError
from tests.support import REPO
from tests.support.machines import desktop

CPU = desktop(isa=("avx2",), cpu_bandwidth_gbps=20)


def test_runtime_loads_with_the_configured_backend_and_a_request_can_override_it(
        tmp_path, qwen):
    """config.toml asks for cuda for this model: on a build without it, loading fails with
    the worker's clear error; a request for llamacpp overrides it and loads."""
    home = Paths(tmp_path)
    (tmp_path / "models").symlink_to(qwen.path.parents[2])  # models/<publisher>/<repo>/file
    home.config_file.write_text(f'[models."{qwen.id}"]\nbackend = "cuda"\n')
    store = Store(home)
    with Runtime(store=store, hardware=dataclasses.replace(CPU, ram_available=8 * 2**30)) as rt:
        assert rt.choose(store.get(qwen.ref)).name == "cuda"
        try:
            import backends.cuda  # noqa: F401
        except ImportError:
            with pytest.raises(BackendError, match="the cuda backend is not available in "
                                                   "this build"):
                rt.load(qwen.ref, context=512)
        loaded = rt.load(qwen.ref, context=512, backend="llamacpp")
        assert loaded.backend == "llamacpp"


def test_ember_hw_shows_a_models_config_override_beside_the_machines_choice(tmp_path, qwen):
    (tmp_path / "models").symlink_to(qwen.path.parents[2])
    (tmp_path / "config.toml").write_text(f'[models."{qwen.id}"]\nbackend = "mlx"\n')
    r = subprocess.run([sys.executable, "-m", "app.cli", "hw", "--json"],
                       cwd=REPO, capture_output=True,
                       text=True, timeout=120, env={**os.environ, "EMBER_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["backend"]["name"] == "llamacpp"  # this machine: no GPU
    assert {"ref": qwen.ref, "backend": "mlx", "reason": "set for this model in config.toml"} \
        in out["installed"]
