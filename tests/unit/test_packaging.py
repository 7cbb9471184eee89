"""Ember always lives in its own virtual environment or bundle, so its top-level packages keep
their short names (app, backends, kernels); what it needs is that nothing else installed
beside it provides them, or one would shadow the other."""

from __future__ import annotations

from importlib.metadata import packages_distributions

import pytest


@pytest.mark.parametrize("package", ["app", "backends", "kernels"])
def test_only_ember_provides_its_top_level_packages(package: str):
    providers = packages_distributions().get(package, [])
    assert set(providers) == {"ember"}, (
        f"`import {package}` is provided by {providers or 'no installed distribution'}: "
        "Ember must be installed (pip install -e .) into an environment of its own")
