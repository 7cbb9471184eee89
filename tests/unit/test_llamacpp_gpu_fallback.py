"""What the llamacpp backend does when its plan's GPU layers cannot run: the steps down it
tries after a failed load, and the line that says a GPU is gone (backends/llamacpp/backend.py;
the load itself on lavapipe: tests/integration/test_llama_vulkan.py)."""

from __future__ import annotations

from backends.llamacpp.backend import fewer_gpu_layers, no_gpu_now
from backends.llamacpp.ggml_backends import Loaded


def test_a_failed_full_offload_halves_the_layers_down_to_the_cpu():
    # 24 repeating layers: all (-1) is 25 with the output; then 12, 6, 3, 1 and the output
    assert fewer_gpu_layers(-1, 24) == [-1, 13, 7, 4, 2, 0]
    assert fewer_gpu_layers(999, 24) == [999, 13, 7, 4, 2, 0]


def test_a_failed_partial_offload_steps_down_from_what_was_asked():
    assert fewer_gpu_layers(13, 24) == [13, 7, 4, 2, 0]
    assert fewer_gpu_layers(2, 24) == [2, 0]
    assert fewer_gpu_layers(1, 24) == [1, 0]  # the output layer alone, then none


def test_a_plan_with_gpu_layers_and_no_gpu_says_why_in_one_line():
    off = no_gpu_now(Loaded(dynamic=True, gpu_off=True))
    assert "EMBER_GPU=off" in off and "the CPU runs it" in off
    failed = no_gpu_now(Loaded(dynamic=True, failed=("libggml-vulkan.so: no Vulkan 1.2",)))
    assert "libggml-vulkan.so: no Vulkan 1.2" in failed
    assert "no GPU device answers now" in no_gpu_now(Loaded(dynamic=True))


def test_a_failed_load_says_why_in_llama_cpp_s_words():
    from backends.llamacpp.llama_log import load_failure

    said = ["alloc_tensor_range: failed to allocate Vulkan0 buffer of size 247216640",
            "llama_model_load: error loading model: unable to allocate Vulkan0 buffer",
            "llama_model_load_from_file_impl: failed to load model"]
    error = ValueError("Failed to load model from file: m.gguf")
    assert load_failure(said, error) == \
        "llama.cpp could not allocate a 235.8 MiB buffer on Vulkan0"
    assert load_failure(said[1:], error) == said[-1]
    assert load_failure([], error) == "Failed to load model from file: m.gguf"


def test_llama_cpp_s_error_lines_are_kept_while_a_block_runs():
    import ctypes

    from backends.llamacpp.llama_log import GGML_LOG_ERROR, _callback, llama_errors

    with llama_errors() as lines:
        _callback(GGML_LOG_ERROR, b"failed to allocate CUDA0 buffer of size 1024\n",
                  ctypes.c_void_p(0))
        _callback(2, b"an info line\n", ctypes.c_void_p(0))
    _callback(GGML_LOG_ERROR, b"after the block\n", ctypes.c_void_p(0))
    assert lines == ["failed to allocate CUDA0 buffer of size 1024"]
