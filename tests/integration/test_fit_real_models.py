"""The fit model on the real GGUF files: load plans on a simulated 8 GB laptop, and the
CPU repack buffers llama.cpp reports."""

from __future__ import annotations

from app.fit import plan_load
from app.fit.estimate import file_repacked_bytes
from app.gguf_file import read_gguf
from tests.support.machines import (
    LAPTOP_8GB,
    GiB,
    profile,
)


def test_load_plan_for_the_real_model_on_this_kind_of_machine(qwen):
    plan = plan_load(read_gguf(qwen.path), LAPTOP_8GB, context=8192)
    assert (plan.context, plan.gpu_layers, plan.threads) == (8192, 0, 4)
    # its 12 Q4_K tensors: 28.05 MiB, what llama.cpp reports as its CPU_REPACK buffer
    assert plan.reason.startswith("CPU: 0.49 GB weights (+0.03 GB reclaimable CPU repack) + "
                                  "0.10 GB KV at 8k context")


def test_repacked_bytes_equal_llama_cpps_cpu_repack_buffers(qwen, qwen15, gemma):
    # measured with llama.cpp's own log ("CPU_REPACK model buffer size")
    for model, mib in [(qwen, 28.05), (qwen15, 596.53), (gemma, 12.66)]:
        assert round(file_repacked_bytes(read_gguf(model.path), LAPTOP_8GB) / 2**20, 2) == mib


def test_load_plan_cuts_the_context_until_it_fits(qwen):
    tiny = profile(2 * GiB, 0.8e9, 2, 10)
    plan = plan_load(read_gguf(qwen.path), tiny, context=32768)
    # budget 0.72 GB: 0.49 weights + 0.12 buffers and overhead leave 0.11 GB, and KV costs
    # 12,288 B a token: 8,192 tokens (0.10 GB) fit, 16,384 (0.20 GB) do not
    assert plan.context == 8192 and "context cut from 32768" in plan.reason
