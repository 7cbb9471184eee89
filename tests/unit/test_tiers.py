"""The tiers' rules hold: every test carries its tier's marker, and a unit test cannot start a
worker process, have llama.cpp load a model or take a real model's fixture
(tests/unit/conftest.py)."""

from __future__ import annotations

import multiprocessing

import llama_cpp
import pytest


def test_a_unit_test_is_marked_unit(request: pytest.FixtureRequest):
    assert request.node.get_closest_marker("unit") is not None
    assert request.node.get_closest_marker("integration") is None


def test_a_unit_test_cannot_start_a_worker_process(tier_guard: list[str]):
    process = multiprocessing.get_context("spawn").Process(target=print)
    with pytest.raises(pytest.fail.Exception, match="started a process"):
        process.start()
    assert tier_guard == ["started a process"] and process.pid is None
    tier_guard.clear()  # seen: the test itself passes


def test_a_unit_test_cannot_have_llama_cpp_load_a_model(tier_guard: list[str]):
    params = llama_cpp.llama_model_default_params()
    with pytest.raises(pytest.fail.Exception, match="had llama.cpp load a model"):
        llama_cpp.llama_model_load_from_file(b"/no/such/model.gguf", params)
    from llama_cpp._internals import LlamaModel  # the backend's way in

    with pytest.raises(pytest.fail.Exception, match="had llama.cpp load a model"):
        LlamaModel(path_model=__file__, params=params, verbose=False)
    assert tier_guard == ["had llama.cpp load a model"] * 2
    tier_guard.clear()


def test_a_unit_test_may_load_a_vocabulary_alone(tier_guard: list[str]):
    from llama_cpp._internals import LlamaModel

    from tests.support.llama_sdist import vocab

    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = LlamaModel(path_model=str(vocab("qwen2")), params=params, verbose=False)
    assert model.tokenize(b"hello", add_bos=False, special=True) == [14990]
    model.close()
    assert tier_guard == []


@pytest.mark.parametrize("fixture", ["qwen", "gemma", "runtime", "store", "qwen_mlx"])
def test_a_unit_test_cannot_take_a_real_model(request: pytest.FixtureRequest, fixture: str):
    with pytest.raises(pytest.fail.Exception, match=f"real model fixture `{fixture}`"):
        request.getfixturevalue(fixture)
