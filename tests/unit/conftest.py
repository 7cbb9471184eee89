"""The unit tier stays honest: a test here fails if it starts a process through
multiprocessing (the Runtime's workers are spawned that way), has llama.cpp load a model file
(a vocabulary alone, `vocab_only`, is fine: milliseconds, no weights), or asks for a real
model's fixture. A violation is recorded as well as raised (pytest's
Failed, which `except Exception` does not catch), so code that swallows the error still
fails the test at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from multiprocessing.process import BaseProcess

import llama_cpp
import llama_cpp.llama_cpp
import pytest

from app.runtime import gpu_devices

# every entry point llama-cpp-python has for reading a model file
LLAMA_LOADS = ("llama_model_load_from_file", "llama_load_model_from_file",
               "llama_model_load_from_splits")
# the session fixtures of tests/conftest.py that pull, load or serve a real model
MODEL_FIXTURES = ("models_home", "store", "runtime", "qwen", "qwen15", "gemma", "qwen_mlx",
                  "qwen15_mlx")


@pytest.fixture(autouse=True)
def tier_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The violations of the test so far (a test of the guard itself may clear them)."""
    violations: list[str] = []

    def refuse(what: str) -> Callable[..., None]:
        def guard(*args: object, **kwargs: object) -> None:
            violations.append(what)
            pytest.fail(f"a unit test {what}: it belongs in tests/integration", pytrace=False)
        return guard

    def vocab_only(load: Callable[..., object]) -> Callable[..., object]:
        refused = refuse("had llama.cpp load a model")

        def guard(path: object, params: object, *rest: object) -> object:
            if getattr(params, "vocab_only", False):
                return load(path, params, *rest)
            return refused()
        return guard

    monkeypatch.setattr(BaseProcess, "start", refuse("started a process"))
    # the GPUs llama.cpp finds are asked of a child process (app.runtime.gpu_devices): none
    # here, on any machine, unless a test sets its own report
    monkeypatch.setattr(gpu_devices, "_report", gpu_devices.DeviceReport(
        skipped="the unit tier asks no GPU child"))
    for name in LLAMA_LOADS:
        for module in (llama_cpp, llama_cpp.llama_cpp):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, vocab_only(getattr(module, name)))
    yield violations
    if violations:
        pytest.fail(f"a unit test {violations[0]}: it belongs in tests/integration",
                    pytrace=False)


def refused_fixture(name: str) -> Callable[[], None]:
    def fixture() -> None:
        pytest.fail(f"a unit test asked for the real model fixture `{name}`: it belongs in "
                    "tests/integration", pytrace=False)
    return pytest.fixture(name=name)(fixture)


for _name in MODEL_FIXTURES:  # these override tests/conftest.py's fixtures for this tier
    globals()[f"refused_{_name}"] = refused_fixture(_name)
