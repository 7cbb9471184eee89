"""The fit model on simulated machines (tests/support/machines.py). Expected numbers are
worked out by hand here, from the formula in app/fit/ (docs/notes/fit-model.md), for Llama 3.1 8B
Instruct (32 layers, 8 KV heads of 128, vocabulary 128,256) at a 4,096-token context."""

from __future__ import annotations

import pytest

from app.fit import estimate, recommend
from app.fit.estimate import kv_cache_bytes
from app.registry import load_registry
from tests.support.machines import (
    GPU_6GB,
    LAPTOP_8GB,
    LLAMA_8B,
    LLAMA_8B_ARCH,
    M2_AIR_16GB,
    RTX_4090,
    SBC_4GB,
    SIZES,
)

# KV: 2 (K, V) x 8 heads x 128 x 2 bytes = 4,096 bytes per token per layer; x 32 layers x 4,096
KV_4K = 4096 * 32 * 4096  # 536,870,912
# buffers on a GPU: 512 x 128,256 x 4 (logits) + 4 MiB + 256 B x 4,096; on the CPU the logits
# part is never touched; overhead 112 MiB
GPU_BUFFERS = 512 * 128256 * 4 + 4 * 2**20 + 256 * 4096  # 267,911,168
CPU_BUFFERS = 4 * 2**20 + 256 * 4096  # 5,242,880
GPU_COMPUTE = 512 * (128256 + 2 * 4096) * 4 + 512 * 2 * 4096  # 283,639,808 (discrete GPU)
OVERHEAD = 112 * 2**20
CPU_TOTAL = {q: n + KV_4K + CPU_BUFFERS + OVERHEAD for q, n in SIZES.items()}
GPU_TOTAL = {q: n + KV_4K + GPU_BUFFERS + OVERHEAD for q, n in SIZES.items()}
KV_READ = 4096 * 32 * 1024  # KV read per token at the quoted 1,024-token fill
# The token embedding (untied: not the output) is read a row a token, so not counted in decode,
# and stays in RAM under offload: int(128,256 x 4,096 x size / 8,030,261,248 parameters)
EMBEDDING = {"Q6_K": 430_788_145, "Q8_0": 558_160_130}


def test_memory_breakdown_matches_the_hand_computation():
    q4 = LLAMA_8B.variants[0]
    cpu = estimate(LLAMA_8B.id, LLAMA_8B_ARCH, LLAMA_8B.params, q4, LAPTOP_8GB, 4096)
    assert cpu.memory.kv_cache == KV_4K == 536_870_912
    assert cpu.memory.buffers == CPU_BUFFERS == 5_242_880
    assert cpu.memory.total == CPU_TOTAL["Q4_K_M"] == 5_578_554_304
    # Q4_K_M keeps a repacked copy of 56% of its bytes on the CPU: resident, not required
    assert cpu.memory.repacked == int(4_919_000_000 * 0.56)
    assert cpu.memory.resident_peak == cpu.memory.total + cpu.memory.repacked
    assert cpu.explain().startswith("CPU: 4.92 GB weights (+2.75 GB reclaimable CPU repack) "
                                    "+ 0.54 GB KV at 4k context + 0.12 GB buffers")
    # on a discrete GPU: 512 x (128,256 + 2 x 4,096) x 4 of logits (over the activations'
    # 512 x (3 x 14,336 + 2 x 4,096) x 4) + the 512 x 4,096 f16 mask, measured on a Vulkan
    # device (tests/unit/test_fit_offload.py); Apple's unified memory keeps GPU_BUFFERS
    gpu = estimate(LLAMA_8B.id, LLAMA_8B_ARCH, LLAMA_8B.params, q4, RTX_4090, 4096)
    assert gpu.memory.buffers == GPU_COMPUTE == 283_639_808
    assert gpu.memory.total == GPU_TOTAL["Q4_K_M"] - GPU_BUFFERS + GPU_COMPUTE
    assert gpu.memory.repacked == 0


def test_8gb_laptop_without_gpu_just_holds_an_8b_model_in_q4_k_m():
    # RAM budget 0.9 x 6.5 GB = 5.85 GB: Q4_K_M needs 5.579 GB (fits, 0.27 GB to spare: less
    # than the 10% headroom, so no variant is "roomy" and the smallest that fits is chosen);
    # Q5_K_M needs 6.38 GB and does not fit.
    fit = recommend(LLAMA_8B, LAPTOP_8GB)
    assert (fit.quant, fit.placement, fit.label) == ("Q4_K_M", "cpu", "CPU")
    assert fit.headroom_bytes == int(0.9 * 6.5e9) - CPU_TOTAL["Q4_K_M"] == 271_445_696
    q5 = estimate(LLAMA_8B.id, LLAMA_8B_ARCH, LLAMA_8B.params, LLAMA_8B.variants[1],
                  LAPTOP_8GB, 4096)
    assert q5.placement == "wont_fit"


def test_8gb_laptop_runs_llama_3_2_3b_on_the_cpu():
    spec = load_registry().get("llama-3.2-3b-instruct")
    fit = recommend(spec, LAPTOP_8GB)
    assert fit.placement == "cpu"
    sizes = {v.quant: v.size_bytes for v in spec.variants if v.format == "gguf"}
    kv_read = 2 * 8 * 128 * 2 * 28 * 1024  # 28 layers at the 1,024-token fill: 117 MB
    # All fit in 5.85 GB with headroom. Decode is bandwidth / bytes per token, so a variant's
    # speed relative to Q4_K_M's (the fastest) is (Q4 + KV read) / (its size + KV read);
    # the recommendation is the largest whose ratio is at least 0.75.
    ratio = {q: (sizes["Q4_K_M"] + kv_read) / (n + kv_read) for q, n in sizes.items()}
    expected = max((q for q in sizes if ratio[q] >= 0.75), key=lambda q: sizes[q])
    assert ratio["Q8_0"] < 0.75 <= ratio["Q5_K_M"]
    assert fit.quant == expected
    assert fit.decode_tokens_per_s == pytest.approx(
        0.50 * 38.4e9 / (sizes[expected] + kv_read), rel=0.01)


def test_16gb_m2_air_runs_8b_fully_on_the_gpu_with_q6_k():
    # GPU budget: min(0.67 x 16 GiB, 0.9 x 12 GB) = 10.8 GB; all four fit. Decode speeds at
    # 0.65 x 100 GB/s over the weights less the embedding: Q4 65/(4.919-0.322+0.134) = 13.7
    # t/s, Q6 65/(6.585-0.431+0.134) = 10.3 (0.752 of it), Q8 8.0 (0.58)
    fit = recommend(LLAMA_8B, M2_AIR_16GB)
    assert (fit.quant, fit.placement) == ("Q6_K", "full_gpu")
    assert fit.decode_tokens_per_s == pytest.approx(
        65e9 / (SIZES["Q6_K"] - EMBEDDING["Q6_K"] + KV_READ), rel=0.01)
    assert fit.headroom_bytes == int(0.9 * 12e9) - GPU_TOTAL["Q6_K"]


def test_rtx_4090_runs_8b_in_q8_0_fully_on_the_gpu():
    # GPU budget 0.95 x 25 GB - 400 MiB = 23.33 GB; Q8_0 at 0.75 x 1008 GB/s = 93 t/s > 20
    fit = recommend(LLAMA_8B, RTX_4090)
    assert (fit.quant, fit.placement, fit.gpu_layers) == ("Q8_0", "full_gpu", 32)
    in_vram = SIZES["Q8_0"] - EMBEDDING["Q8_0"]  # the embedding stays in RAM
    assert fit.decode_tokens_per_s == pytest.approx(0.75 * 1008e9 / (in_vram + KV_READ),
                                                    rel=0.01)
    # on the GPU: weights but the embedding, KV, the GPU compute buffer (the process is in RAM)
    assert fit.headroom_bytes == (int(0.95 * 25e9) - 400 * 2**20
                                  - (in_vram + KV_4K + GPU_COMPUTE))


def test_4gb_single_board_computer_runs_the_0_5b_coder_on_the_cpu():
    spec = load_registry().get("qwen2.5-coder-0.5b-instruct")
    fit = recommend(spec, SBC_4GB)
    # 491,400,064 + KV 12,288 B x 4,096 + 4 MiB + 1 MiB buffers + 112 MiB
    total = 491_400_064 + 12_288 * 4096 + 5 * 2**20 + 112 * 2**20
    assert fit.memory.total == total == 664_415_104
    assert (fit.placement, fit.quant) == ("cpu", "Q4_K_M")
    assert recommend(LLAMA_8B, SBC_4GB).placement == "wont_fit"


def test_6gb_gpu_needs_partial_offload_and_prefers_q4_with_29_of_32_layers():
    # GPU budget 0.95 x 5.8 GB - 400 MiB = 5,090,569,600 B. llama.cpp puts the output layer
    # (430,940,160 B: 128,256 x 4,096 at Q6_K's 6.5625 bits) and the compute buffer
    # (283,639,808) on the GPU with the first layer; each layer adds (4.919 GB - 321,799,071
    # embedding - 430,940,160) / 32 = 130,195,649 B of weights and 16,777,216 of KV: 29 layers
    # take 4,976,793,054 B, 30 would take 5,123,765,919 (tests/unit/test_fit_offload.py).
    q4 = estimate(LLAMA_8B.id, LLAMA_8B_ARCH, LLAMA_8B.params, LLAMA_8B.variants[0],
                  GPU_6GB, 4096)
    assert (q4.placement, q4.gpu_layers, q4.label) == (
        "partial", 29, "partial offload (29/32 layers on GPU)")
    assert q4.gpu_bytes == 4_976_793_054
    # the GPU reads 430,940,160 + 29 x (130,195,649 + 4,194,304 KV at 1,024 tokens) at
    # 0.75 x 360 GB/s (16.0 ms), the CPU 3 x 134,389,953 at 0.50 x 40 GB/s (20.2 ms): 27.6
    # tokens/s; Q5_K_M gets 25 layers and 14.0 t/s, under 75% of that: Q4_K_M is recommended.
    assert q4.decode_tokens_per_s == pytest.approx(27.6, abs=0.1)
    fit = recommend(LLAMA_8B, GPU_6GB)
    assert (fit.quant, fit.gpu_layers) == ("Q4_K_M", 29)


def test_sliding_window_layers_hold_only_their_window():
    gemma = load_registry().get("gemma-3-270m").arch
    # measured in llama.cpp (swa_full off): 3 global layers x 8,192 cells = 24 MiB, and
    # 15 sliding layers x (512 + 512 ubatch) cells = 15 MiB
    assert kv_cache_bytes(gemma, 8192) == 39 * 2**20
    qwen = load_registry().get("qwen2.5-coder-0.5b-instruct").arch
    assert kv_cache_bytes(qwen, 2048) == 24 * 2**20  # measured: 24.00 MiB
    assert kv_cache_bytes(qwen, 2048, parallel=4) == 96 * 2**20


def test_a_hybrid_models_linear_layers_hold_a_fixed_state_not_a_kv_cache():
    from dataclasses import replace

    from app.fit.offload import kv_split, layer_cells
    from app.registry import Arch

    # Qwen3.5-4B's numbers (models.yaml): 32 layers, every 4th full attention with 4 KV heads
    # of 256; the 24 Gated DeltaNet layers keep, per sequence, float32 conv history
    # 3 x (2 x 16 x 128 + 32 x 128) and a 128 x 128 state for each of 32 value heads
    arch = Arch(type="qwen35", layers=32, hidden=2560, heads=16, kv_heads=4, head_dim=256,
                vocab=248320, ffn=9216, tied_embeddings=True, full_attention_interval=4,
                linear_key_heads=16, linear_value_heads=32, linear_head_dim=128,
                linear_conv_kernel=4)
    cells = layer_cells(arch, 8192)
    assert [il for il, c in enumerate(cells) if c] == [3, 7, 11, 15, 19, 23, 27, 31]
    kv = 8 * 2 * 4 * 256 * 2 * 8192  # 8 layers x K and V x 4 heads x 256 x f16 x context
    state = 24 * 4 * (3 * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128)  # ~50 MiB
    assert kv_cache_bytes(arch, 8192) == kv + state == 256 * 2**20 + 52_690_944
    # the state does not grow with the context and is one per sequence
    assert kv_cache_bytes(arch, 16384) - kv_cache_bytes(arch, 8192) == kv
    assert kv_cache_bytes(arch, 8192, parallel=2) == 2 * (kv + state)
    # offloading the last 4 layers takes one attention layer and 3 linear ones to the GPU
    gpu, cpu = kv_split(arch, 8192, 4)
    assert gpu == kv // 8 + 3 * state // 24 and gpu + cpu == kv + state
    # the same numbers without the hybrid field would count 32 KV layers (4x the cache)
    dense = replace(arch, full_attention_interval=None)
    assert kv_cache_bytes(dense, 8192) == 4 * kv


def test_an_installed_qwen35_file_gives_the_hybrid_layout(tmp_path):
    import gguf
    import numpy as np

    from app.fit.estimate import arch_from_gguf
    from app.gguf_file import read_gguf

    # the keys llama.cpp's qwen35 loader reads (src/models/qwen35.cpp): ssm.state_size is the
    # linear heads' width, ssm.group_count the key heads, ssm.inner_size value heads x width
    path = tmp_path / "hybrid.gguf"
    writer = gguf.GGUFWriter(str(path), "qwen35")
    for key, value in {"block_count": 8, "embedding_length": 16, "feed_forward_length": 32,
                       "attention.head_count": 2, "attention.head_count_kv": 1,
                       "attention.key_length": 8, "full_attention_interval": 4,
                       "ssm.conv_kernel": 4, "ssm.state_size": 8, "ssm.group_count": 2,
                       "ssm.inner_size": 32}.items():
        writer.add_uint32(f"qwen35.{key}", value)
    writer.add_context_length(256)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tensor("token_embd.weight", np.zeros((8, 16), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    arch = arch_from_gguf(read_gguf(path, check_architecture=False))
    assert (arch.full_attention_interval, arch.linear_key_heads, arch.linear_value_heads,
            arch.linear_head_dim, arch.linear_conv_kernel) == (4, 2, 4, 8, 4)
    kv = 2 * 2 * 1 * 8 * 2 * 100  # 2 attention layers x K and V x 1 head x 8 x f16 x 100 cells
    state = 6 * 4 * (3 * (2 * 2 * 8 + 4 * 8) + 4 * 8 * 8)  # 6 linear layers, float32
    assert kv_cache_bytes(arch, 100) == kv + state


def test_gemma4_global_layers_hold_their_own_kv_heads_and_width():
    from dataclasses import replace

    from app.fit.cuda import kv_cache_bytes as cuda_kv_cache_bytes
    from app.fit.offload import kv_split
    from app.registry import Arch

    # Gemma 4 31B's numbers (models.yaml): 60 layers, every 6th global; sliding layers 16 KV
    # heads x 256 over a 1,024 window, global ones 4 KV heads x 512 over the whole context
    arch = Arch(type="gemma4", layers=60, hidden=5376, heads=32, kv_heads=16, head_dim=256,
                vocab=262144, ffn=21504, sliding_window=1024, sliding_pattern=6,
                tied_embeddings=True, global_kv_heads=4, global_head_dim=512)
    sliding = 50 * (1024 + 512) * 2 * 16 * 256 * 2  # cells: the window + a ubatch
    global_ = 10 * 8192 * 2 * 4 * 512 * 2
    assert kv_cache_bytes(arch, 8192) == sliding + global_ == 1_929_379_840
    # the last 6 layers on the GPU: 5 sliding and the last global one
    gpu, cpu = kv_split(arch, 8192, 6)
    assert gpu == sliding // 10 + global_ // 10 and gpu + cpu == sliding + global_
    # with the sliding layers' shape for all, the global layers' cache would come out twice
    same = replace(arch, global_kv_heads=None, global_head_dim=None)
    assert kv_cache_bytes(same, 8192) == sliding + 2 * global_
    # the cuda engine's estimate gives the global layers the same shape
    assert cuda_kv_cache_bytes(arch, 8192, 1, "bfloat16") < cuda_kv_cache_bytes(same, 8192, 1,
                                                                          "bfloat16")
