"""Which backend runs a model, for simulated machines, and how the user overrides it."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from app.config import Paths
from app.errors import ConfigError
from app.hardware import GPU
from app.runtime import backend_table
from app.runtime.backend_choice import choose_backend, configured_backend
from app.runtime.backend_table import make_backend
from backends.errors import EmberError, InvalidRequestError
from tests.support.machines import desktop

RTX = GPU("NVIDIA GeForce RTX 4090", "nvidia", 24 * 2**30, 23 * 2**30, "8.9", 1008)
APPLE = GPU("Apple M3 Max GPU", "apple", 48 * 2**30, 48 * 2**30, None, 400)
NVIDIA_TORCH = desktop(gpus=(RTX,), torch_cuda="2.13.0+cu128")
NVIDIA_NO_TORCH = desktop(gpus=(RTX,))
MAC = desktop(machine="arm64", isa=("neon",), gpus=(APPLE,), apple_chip="M3 Max")
CPU = desktop(isa=("avx2",), cpu_bandwidth_gbps=20)


WITH_TORCH = "NVIDIA GeForce RTX 4090 (24 GB) with torch 2.13.0+cu128 CUDA"


def test_nvidia_with_torch_runs_gguf_on_llamacpp_where_it_has_a_backend_for_the_gpu():
    # llama.cpp on the GPU is the default for GGUF: no measurement says the cuda engine is
    # faster for this model (app.runtime.backend_speeds)
    choice = choose_backend(NVIDIA_TORCH, gpu_offload=True, formats=("gguf",),
                            model=("llama", "Q4_K_M"))
    assert choice.name == "llamacpp"
    assert choice.reason == (
        "NVIDIA GeForce RTX 4090 (24 GB): llama.cpp with GPU offload; Ember's CUDA engine runs "
        "a GGUF model only where it was measured faster (none measured for this one: "
        "docs/notes/backend-choice.md)")
    assert choose_backend(NVIDIA_TORCH, gpu_offload=True).name == "llamacpp"  # `ember hw`


def test_nvidia_with_torch_runs_cuda_where_llamacpp_cannot():
    # safetensors: llama.cpp does not load them
    choice = choose_backend(NVIDIA_TORCH, gpu_offload=True, formats=("safetensors",))
    assert (choice.name, choice.reason) == (
        "cuda", f"{WITH_TORCH}: Ember's CUDA engine (llama.cpp does not load safetensors)")
    # a GPU llama.cpp has no backend for (no Vulkan driver, no CUDA module)
    for formats in (("gguf",), None):
        choice = choose_backend(NVIDIA_TORCH, gpu_offload=False, formats=formats)
        assert (choice.name, choice.reason) == (
            "cuda", f"{WITH_TORCH}: Ember's CUDA engine (llama.cpp has no backend for this GPU "
                    "here and would run on the CPU)")


def test_a_measured_row_sends_a_gguf_model_to_the_cuda_engine_where_it_is_faster(monkeypatch):
    from app.runtime import backend_choice, backend_speeds

    rows = (backend_speeds.Measured("RTX 4090", "llama", "Q8_0", 95.0, "CUDA", 120.0,
                                    "2026-11-28, benchmarks/gpu_checks.sh llama"),
            backend_speeds.Measured("RTX 4090", "llama", "Q4_K_M", 150.0, "CUDA", 110.0,
                                    "2026-11-28, benchmarks/gpu_checks.sh llama"))
    monkeypatch.setattr(backend_choice, "cuda_faster",
                        lambda gpu, arch, quant: backend_speeds.cuda_faster(gpu, arch, quant,
                                                                            rows))
    faster = choose_backend(NVIDIA_TORCH, gpu_offload=True, formats=("gguf",),
                            model=("llama", "q8_0"))
    assert faster.name == "cuda"
    assert faster.reason == (
        f"{WITH_TORCH}: Ember's CUDA engine, measured faster for llama q8_0 on RTX 4090 (120 "
        "against llama.cpp's 95 tokens/s with CUDA; 2026-11-28, benchmarks/gpu_checks.sh llama)")
    # llama.cpp measured faster, another architecture, or no model named: llama.cpp
    for model in (("llama", "Q4_K_M"), ("qwen2", "Q8_0"), None):
        assert choose_backend(NVIDIA_TORCH, gpu_offload=True, formats=("gguf",),
                              model=model).name == "llamacpp"
    # a request or config.toml still wins
    assert choose_backend(NVIDIA_TORCH, gpu_offload=True, formats=("gguf",),
                          requested="cuda").name == "cuda"
    assert choose_backend(NVIDIA_TORCH, gpu_offload=True, formats=("gguf",),
                          model=("llama", "Q8_0"), configured="llamacpp").name == "llamacpp"


def test_nvidia_gpu_without_torch_cuda_stays_on_llamacpp_and_says_what_is_missing(monkeypatch):
    choice = choose_backend(NVIDIA_NO_TORCH, gpu_offload=True, formats=("gguf",))
    assert choice.name == "llamacpp"
    assert choice.reason.endswith("llama.cpp with GPU offload; the cuda backend needs torch "
                                  "with CUDA (pip install -e '.[cuda]')")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", "/opt/ember/_internal", raising=False)
    choice = choose_backend(NVIDIA_NO_TORCH, gpu_offload=True, formats=("gguf",))
    assert choice.reason.endswith("the cuda backend needs torch with CUDA, which is not part "
                                  "of this build of Ember")


def test_hidden_imports_name_every_backend_module_the_worker_imports_by_name():
    assert backend_table.hidden_imports() == ["backends.llamacpp.backend",
                                              "backends.cuda.backend", "backends.mlx.backend"]
    assert backend_table.hidden_imports(("llamacpp",)) == ["backends.llamacpp.backend"]
    with pytest.raises(InvalidRequestError, match="unknown backend 'tpu'"):
        backend_table.hidden_imports(("tpu",))


def test_nvidia_with_torch_but_an_mlx_only_model_is_not_sent_to_cuda():
    assert choose_backend(NVIDIA_TORCH, gpu_offload=False, formats=("mlx",)).name == "mlx"


def test_apple_silicon_runs_mlx_models_on_mlx_and_gguf_models_on_llamacpp_metal():
    mlx = choose_backend(MAC, gpu_offload=True, formats=("mlx", "gguf"))
    assert (mlx.name, mlx.reason) == ("mlx", "Apple M3 Max, unified memory: MLX (the model "
                                             "has an MLX variant)")
    gguf = choose_backend(MAC, gpu_offload=True, formats=("gguf",))
    assert gguf.name == "llamacpp"
    assert gguf.reason == ("Apple M3 Max, unified memory: llama.cpp with Metal; this model "
                           "has no MLX variant")


def test_a_cpu_only_machine_runs_llamacpp():
    choice = choose_backend(CPU, gpu_offload=False, formats=("gguf",))
    assert choice.name == "llamacpp" and choice.reason.startswith("no GPU: llama.cpp on the CPU")


def test_a_request_overrides_config_which_overrides_the_hardware_rule():
    both = choose_backend(NVIDIA_TORCH, False, ("gguf",), requested="mlx", configured="llamacpp")
    assert (both.name, both.reason) == ("mlx", "asked for in this request")
    configured = choose_backend(NVIDIA_TORCH, False, ("gguf",), configured="llamacpp")
    assert (configured.name, configured.reason) == ("llamacpp",
                                                    "set for this model in config.toml")
    with pytest.raises(InvalidRequestError, match="unknown backend 'tpu': choose one of "
                                                  "llamacpp, cuda, mlx"):
        choose_backend(CPU, False, ("gguf",), requested="tpu")


def test_config_toml_sets_a_backend_per_model_and_rejects_unknown_ones(tmp_path):
    paths = Paths(tmp_path)
    paths.config_file.write_text('[models."qwen2.5-coder-0.5b-instruct"]\nbackend = "cuda"\n'
                                 '[models.other]\nbackend = "gpu"\n')
    assert configured_backend("qwen2.5-coder-0.5b-instruct", paths) == "cuda"
    assert configured_backend("gemma-3-270m", paths) is None
    with pytest.raises(ConfigError, match=r"\[models.\"other\"\]: unknown backend 'gpu'"):
        configured_backend("other", paths)


def test_a_backend_missing_from_this_build_fails_with_a_clear_error(monkeypatch):
    # what a build without backends/cuda or mlx installed looks like to the worker
    cuda = backend_table.BACKENDS["cuda"]
    monkeypatch.setitem(backend_table.BACKENDS, "cuda",
                        dataclasses.replace(cuda, module="backends.not_built"))
    with pytest.raises(EmberError, match=r"the cuda backend is not available in this build "
                                         r"\(No module named 'backends.not_built'\); it needs: "
                                         r"pip install -e '.\[cuda\]' on a machine with an "
                                         r"NVIDIA GPU, or choose another with --backend"):
        make_backend("cuda")
    # in a PyInstaller bundle nothing can be installed: the build simply lacks it
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", "/opt/ember/_internal", raising=False)
    with pytest.raises(EmberError, match=r"the cuda backend is not available in this build "
                                         r"\(No module named 'backends.not_built'\); it is not "
                                         r"part of this build of Ember, or choose another with "
                                         r"--backend"):
        make_backend("cuda")
    monkeypatch.undo()
    with pytest.raises(EmberError, match="runs in the app's process"):
        make_backend("remote")
    with pytest.raises(EmberError, match="unknown backend 'tpu'"):
        make_backend("tpu")
