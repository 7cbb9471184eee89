"""The Runtime plans a cuda load of the real Gemma 3 270M with the cuda engine's fit model
(app/fit/cuda.py; the fit model itself: tests/unit/test_cuda_fit.py)."""

from __future__ import annotations

from app.fit.cuda import (
    plan_cuda_gguf,
)
from app.gguf_file import read_gguf
from app.runtime import Runtime


def test_the_runtime_plans_a_cuda_load_with_the_engines_memory(gemma, store):
    info = read_gguf(gemma.path)
    with Runtime(store=store) as runtime:
        plan = runtime._plan(gemma, 2048, "cuda")
        llama = runtime._plan(gemma, 2048, "llamacpp")
    assert plan == plan_cuda_gguf(info, runtime.hardware, 2048, runtime.parallel)
    assert plan.reason.startswith("Ember's engine on the CPU, float32")
    assert plan.batch == 256 and plan.context == 2048
    # float32: 4 bytes for each of Gemma 3 270M's parameters, the Q4_K_M file is 0.25 GB
    assert plan.memory_bytes > llama.memory_bytes + 3 * info.params - info.file_size
