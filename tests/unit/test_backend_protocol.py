"""Every concrete backend is a `backends.base.Backend`, checked twice: mypy checks the
assignments below (this file is in pyproject's [tool.mypy] files), and the tests compare each
method's parameters with the protocol's, so a backend that drifts fails here, not in a worker
at the first request that calls the method."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest

from app.runtime.backend_table import BACKENDS
from backends.base import Backend
from backends.cuda.backend import CudaBackend
from backends.errors import BackendError, InvalidRequestError
from backends.llamacpp.backend import LlamaCppBackend
from backends.mlx.backend import MlxBackend


# For mypy: a backend whose signatures drift from the protocol fails to type-check here.
def _llamacpp_is_a_backend(backend: LlamaCppBackend) -> Backend:
    return backend


def _mlx_is_a_backend(backend: MlxBackend) -> Backend:
    return backend


def _cuda_is_a_backend(backend: CudaBackend) -> Backend:
    return backend


CONCRETE: dict[str, type[Backend]] = {
    "llamacpp": LlamaCppBackend, "mlx": MlxBackend, "cuda": CudaBackend}
METHODS = sorted(n for n, v in vars(Backend).items()
                 if inspect.isfunction(v) and not n.startswith("_"))


def _parameters(method: Callable[..., object]) -> list[tuple[str, object]]:
    """(name, default) of each parameter after `self`; annotations are mypy's to compare."""
    params = list(inspect.signature(method).parameters.values())[1:]
    return [(p.name, p.default) for p in params]


def test_the_protocol_lists_every_method_a_worker_calls() -> None:
    assert METHODS == ["capabilities", "count_prompt_tokens", "detokenize", "embed",
                       "fail_all", "generate",
                       "has_work", "load", "step", "submit", "tokenize", "unload"]
    assert Backend.__annotations__ == {"name": "str", "tokenizes_while_stepping": "bool"}


def test_the_backend_table_names_exactly_these_classes() -> None:
    assert {name: (e.module, e.cls) for name, e in BACKENDS.items()} == {
        name: (cls.__module__, cls.__name__) for name, cls in CONCRETE.items()}


@pytest.mark.parametrize("backend", list(CONCRETE))
@pytest.mark.parametrize("method", METHODS)
def test_each_backend_method_takes_the_protocols_parameters(backend: str, method: str) -> None:
    cls = CONCRETE[backend]
    assert callable(getattr(cls, method, None)), f"{cls.__name__} has no {method}()"
    assert _parameters(getattr(cls, method)) == _parameters(getattr(Backend, method))


@pytest.mark.parametrize("backend", list(CONCRETE))
def test_each_backend_has_its_table_name(backend: str) -> None:
    assert CONCRETE[backend].name == backend


@pytest.mark.parametrize("backend", list(CONCRETE))
def test_each_backend_says_whether_it_tokenizes_while_a_step_runs(backend: str) -> None:
    """The worker answers tokenizing and counting from its reader thread only where the
    backend says so; only llama.cpp's vocabulary is known safe for it."""
    assert CONCRETE[backend].tokenizes_while_stepping is (backend == "llamacpp")


@pytest.mark.parametrize("backend", list(CONCRETE))
def test_a_backend_refuses_embeddings_outright_exactly_when_it_says_it_has_none(
        backend: str) -> None:
    """Runtime.embed trusts capabilities().embeddings to refuse before loading a model; a
    backend that has embeddings gets as far as asking for its (unloaded) model."""
    instance = CONCRETE[backend]()
    with pytest.raises((BackendError, InvalidRequestError)) as refused:
        instance.embed(["hello"])
    has_none = isinstance(refused.value, InvalidRequestError)
    assert has_none == (not instance.capabilities().embeddings), refused.value
