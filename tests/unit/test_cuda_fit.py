"""The cuda engine's fit model (app/fit/cuda.py) on simulated machines: weights in the dtype
the engine keeps, KV blocks exactly as its model runner allocates them, no partial offload."""

from __future__ import annotations

from dataclasses import replace

import torch

from app.fit import fits_for, recommend
from app.fit.cuda import (
    estimate_cuda,
    kv_cache_bytes,
    weight_bytes,
)
from app.registry import Arch
from backends.cuda.engine import Engine, EngineConfig
from backends.cuda.model_config import ModelConfig
from backends.cuda.models import build_model
from tests.support.machines import GPU_6GB, LAPTOP_8GB, LLAMA_8B, LLAMA_8B_ARCH, RTX_4090

RTX_4090_TORCH = replace(RTX_4090, torch_cuda="2.13.0")
GPU_6GB_TORCH = replace(GPU_6GB, torch_cuda="2.13.0")
EMBED = 2 * 128256 * 4096  # Llama 3.1 8B: embedding and output head, untied
# bf16: every weight 2 bytes, whatever the GGUF file's quantization
BF16_WEIGHTS = LLAMA_8B.params * 2  # 16,060,522,496
# KV: 2 x 8 heads x 128 x 2 bytes = 4,096 bytes per token per layer; 4,096 tokens = 256
# blocks of 16, one scratch block more; x 32 layers
BF16_KV_4K = 4096 * (256 + 1) * 16 * 32  # 538,968,064
KV_READ = 4096 * 32 * 1024  # read per token at the quoted 1,024-token fill

GEMMA_270M = dict(vocab=262144, hidden=640, heads=4, kv_heads=1, head_dim=256, ffn=2048,
                  layers=18, window=512)


def test_weights_are_kept_in_bf16_on_the_gpu_and_int4_shrinks_only_the_linear_layers():
    assert weight_bytes(LLAMA_8B_ARCH, LLAMA_8B.params, "bfloat16", "bfloat16") == BF16_WEIGHTS
    assert weight_bytes(LLAMA_8B_ARCH, LLAMA_8B.params, "float32", "float32") == \
        2 * BF16_WEIGHTS
    int4 = weight_bytes(LLAMA_8B_ARCH, LLAMA_8B.params, "int4", "bfloat16")
    assert int4 == int((LLAMA_8B.params - EMBED) * 4.25 / 8 + EMBED * 2)


def test_on_an_rtx_4090_every_gguf_variant_costs_the_same_so_the_best_quality_is_recommended():
    fits = fits_for(LLAMA_8B, RTX_4090_TORCH)
    assert {f.memory.weights for f in fits} == {BF16_WEIGHTS}
    assert {f.memory.kv_cache for f in fits} == {BF16_KV_4K}
    assert all(f.placement == "full_gpu" and f.gpu_layers == 32 for f in fits)
    # decode: 80% of 1,008 GB/s over the bf16 weights and the KV at 1,024 tokens
    assert fits[0].decode_tokens_per_s == round(0.8 * 1008e9 / (BF16_WEIGHTS + KV_READ), 1)
    assert recommend(LLAMA_8B, RTX_4090_TORCH).quant == "Q8_0"
    # without torch's CUDA the llama.cpp fit applies: a Q4_K_M file stays 4.9 GB
    assert fits_for(LLAMA_8B, RTX_4090)[0].memory.weights == 4_919_000_000


def test_the_engine_has_no_partial_offload_a_model_over_the_gpu_does_not_fit():
    fit = estimate_cuda(LLAMA_8B.id, LLAMA_8B_ARCH, LLAMA_8B.params, LLAMA_8B.variants[0],
                        GPU_6GB_TORCH, 4096)
    assert fit.placement == "wont_fit" and fit.decode_tokens_per_s == 0.0
    assert fit.headroom_bytes < 0
    int4 = estimate_cuda(LLAMA_8B.id, LLAMA_8B_ARCH, LLAMA_8B.params, LLAMA_8B.variants[0],
                         GPU_6GB_TORCH, 4096, weight_dtype="int4")
    # int4 linear layers: 5.8 GB, still over the 6 GB card's 5.1 GB budget (the bf16
    # embedding and output head alone are 2.1 GB)
    assert int4.placement == "wont_fit" and 5.7e9 < int4.memory.weights < 5.9e9


def test_on_the_cpu_the_engine_keeps_float32_and_quotes_the_cpu_bandwidth():
    fit = estimate_cuda(LLAMA_8B.id, LLAMA_8B_ARCH, LLAMA_8B.params, LLAMA_8B.variants[0],
                        LAPTOP_8GB, 4096)
    assert fit.memory.weights == 2 * BF16_WEIGHTS and fit.placement == "wont_fit"


def engine_kv_bytes(cfg: ModelConfig, context: int, seqs: int, max_tokens: int) -> int:
    """What the engine's model runner really allocates (model on the meta device)."""
    engine = Engine(build_model(cfg), EngineConfig(context=context, max_seqs=seqs,
                                                   max_tokens=max_tokens),
                    torch.device("cpu"), torch.float32)
    return engine.runner.kv_cache_bytes


def test_kv_prediction_equals_the_engines_blocks_for_gemma_3_windows_and_a_dense_model():
    g = GEMMA_270M
    cfg = ModelConfig(arch="gemma3", vocab_size=g["vocab"], hidden_size=g["hidden"],
                      num_layers=g["layers"], num_heads=g["heads"], num_kv_heads=g["kv_heads"],
                      head_dim=g["head_dim"], intermediate_size=g["ffn"], rms_norm_eps=1e-6,
                      rope_theta=1e6, max_position=32768, tie_embeddings=True, qk_norm=True,
                      sliding_window=g["window"], sliding_pattern=6)
    arch = Arch(type="gemma3", layers=g["layers"], hidden=g["hidden"], heads=g["heads"],
                kv_heads=g["kv_heads"], head_dim=g["head_dim"], vocab=g["vocab"],
                ffn=g["ffn"], sliding_window=g["window"], sliding_pattern=6,
                tied_embeddings=True)
    for context, seqs in [(8192, 2), (1024, 1), (512, 4)]:
        assert kv_cache_bytes(arch, context, seqs, "float32", 256) == \
            engine_kv_bytes(cfg, context, seqs, 256), (context, seqs)
    # at 8k the 15 sliding layers hold 49 blocks a sequence instead of 512
    dense = replace(arch, sliding_window=None, sliding_pattern=None)
    assert kv_cache_bytes(arch, 8192, 2, "float32") < 0.25 * kv_cache_bytes(dense, 8192, 2,
                                                                             "float32")
    qwen = replace(cfg, arch="qwen2", sliding_window=0, sliding_pattern=0, num_kv_heads=2,
                   head_dim=64, num_layers=24)
    assert kv_cache_bytes(replace(dense, kv_heads=2, head_dim=64, layers=24), 4096, 3,
                          "float32", 256) == engine_kv_bytes(qwen, 4096, 3, 256)
