"""The KV cache's type in the fit model: q8_0 only where f16 would not fit the context asked
for, said in the plan's reason; EMBER_KV_CACHE forces a type; and the largest context a
machine gives a model. Numbers worked out by hand for Llama 3.1 8B Q4_K_M (32 layers, 8 KV
heads of 128): 131,072 bytes of f16 K and V a token, 69,632 in q8_0 (34 bytes per 32 values)."""

from __future__ import annotations

import pytest

from app.config import ConfigError
from app.fit.base import Fit, size_load
from app.fit.cuda import plan_cuda_load
from app.fit.estimate import estimate, kv_cache_bytes
from app.hardware import HardwareProfile
from app.registry import load_registry
from app.runtime.runtime import LARGEST_CONTEXT
from tests.support.machines import LAPTOP_8GB, LLAMA_8B, LLAMA_8B_ARCH, desktop

Q4 = LLAMA_8B.variants[0]  # Q4_K_M, 4,919,000,000 bytes
KV_TYPES = ("f16", "q8_0")


def llama_cpp_load(hw: HardwareProfile, context: int | None, parallel: int = 1):
    """The llama.cpp load rule (app.fit.estimate.plan_load's) for Llama 3.1 8B Q4_K_M."""
    return size_load(
        lambda c, p, kv: estimate(LLAMA_8B.id, LLAMA_8B_ARCH, LLAMA_8B.params, Q4, hw, c, p,
                                  kv=kv),
        hw, LLAMA_8B.context_max, context, parallel,
        lambda fit, ctx, threads: f"{fit.label}: {fit.memory.describe(ctx)}",
        kv_types=KV_TYPES)


def test_q8_0_takes_34_bytes_per_32_values():
    qwen = load_registry().get("qwen2.5-coder-0.5b-instruct").arch
    # 24 layers x 2 x 2 heads x 64 x 2048 cells: 12,582,912 values
    assert kv_cache_bytes(qwen, 2048, kv="f16") == 12_582_912 * 2
    assert kv_cache_bytes(qwen, 2048, kv="q8_0") == 12_582_912 * 34 // 32
    assert kv_cache_bytes(LLAMA_8B_ARCH, 8192, kv="q8_0") == 8192 * 69_632


def test_f16_stays_where_it_fits_the_context_and_the_reason_says_nothing_of_it(monkeypatch):
    monkeypatch.delenv("EMBER_KV_CACHE", raising=False)
    sized = llama_cpp_load(LAPTOP_8GB, 4096)
    assert (sized.context, sized.fit.kv_cache) == (4096, "f16")
    assert "KV cache" not in sized.reason


def test_the_largest_context_on_an_8gb_laptop_is_8k_in_q8_0_where_f16_stops_at_4k(monkeypatch):
    # budget 0.9 x 6.5 GB = 5.85 GB. f16 at 8k: 4.919 + 1.074 KV + 0.006 + 0.117 = 6.12 GB;
    # q8_0 at 8k: 4.919 + 0.570 + 0.006 + 0.117 = 5.61 GB; q8_0 at 16k: 6.18 GB.
    monkeypatch.delenv("EMBER_KV_CACHE", raising=False)
    sized = llama_cpp_load(LAPTOP_8GB, LARGEST_CONTEXT, parallel=8)
    assert (sized.context, sized.parallel, sized.fit.kv_cache) == (8192, 1, "q8_0")
    assert sized.fit.memory.kv_cache == 8192 * 69_632
    assert sized.reason.endswith("(context cut from 131072 to fit); KV cache q8_0: 8k context "
                                 "fits in 0.57 GB instead of 1.07 GB (f16 would fit 4k)")


def test_a_desktop_gives_the_whole_trained_context_in_f16_at_one_sequence(monkeypatch):
    # budget 0.9 x 28 GiB = 27.06 GB; 128k f16 at 1 sequence: 4.919 + 17.18 + 0.04 + 0.12 =
    # 22.25 GB; at 2 sequences 39.4 GB. The parallel sequences go first (shrink_to_fit).
    monkeypatch.delenv("EMBER_KV_CACHE", raising=False)
    sized = llama_cpp_load(desktop(), LARGEST_CONTEXT, parallel=8)
    assert (sized.context, sized.parallel, sized.fit.kv_cache) == (131072, 1, "f16")


def test_ember_kv_cache_forces_the_type(monkeypatch):
    monkeypatch.setenv("EMBER_KV_CACHE", "f16")
    assert llama_cpp_load(LAPTOP_8GB, LARGEST_CONTEXT).context == 4096
    monkeypatch.setenv("EMBER_KV_CACHE", "Q8_0")
    sized = llama_cpp_load(LAPTOP_8GB, 2048)
    assert (sized.context, sized.fit.kv_cache) == (2048, "q8_0")
    assert sized.reason.endswith("; KV cache q8_0 (EMBER_KV_CACHE)")


def test_an_unknown_ember_kv_cache_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("EMBER_KV_CACHE", "q4_0")
    with pytest.raises(ConfigError, match=r"EMBER_KV_CACHE='q4_0' is not a KV cache type: use "
                                          r"f16 or q8_0, or leave it unset"):
        llama_cpp_load(LAPTOP_8GB, 4096)


def test_the_cuda_engine_keeps_its_own_kv_cache_and_says_so(monkeypatch):
    monkeypatch.setenv("EMBER_KV_CACHE", "q8_0")
    plan = plan_cuda_load(LLAMA_8B.id, LLAMA_8B_ARCH, LLAMA_8B.params, Q4, desktop(),
                          LLAMA_8B.context_max, 4096)
    assert plan.kv_cache == "f16"
    assert ("; KV cache f16: EMBER_KV_CACHE=q8_0 is the llamacpp backend's, the cuda backend "
            "keeps its own") in plan.reason


def test_fit_carries_its_kv_cache_type():
    fit: Fit = estimate(LLAMA_8B.id, LLAMA_8B_ARCH, LLAMA_8B.params, Q4, LAPTOP_8GB, 4096,
                        kv="q8_0")
    assert fit.kv_cache == "q8_0" and fit.memory.kv_cache == 4096 * 69_632


def test_a_kv_cache_type_set_for_the_model_wins_over_the_environment(monkeypatch):
    # the window's per-model load setting (app.presets.ModelLoad) reaches the rule
    monkeypatch.setenv("EMBER_KV_CACHE", "f16")
    sized = size_load(
        lambda c, p, kv: estimate(LLAMA_8B.id, LLAMA_8B_ARCH, LLAMA_8B.params, Q4, LAPTOP_8GB,
                                  c, p, kv=kv),
        LAPTOP_8GB, LLAMA_8B.context_max, 2048, 1,
        lambda fit, ctx, threads: fit.label, kv_types=KV_TYPES, kv_cache="q8_0")
    assert (sized.context, sized.fit.kv_cache) == (2048, "q8_0")
    assert sized.reason.endswith("; KV cache q8_0 (set for this model)")
    with pytest.raises(ConfigError, match="'q4_0' is not a KV cache type: use f16 or q8_0"):
        size_load(lambda c, p, kv: estimate(LLAMA_8B.id, LLAMA_8B_ARCH, LLAMA_8B.params, Q4,
                                            LAPTOP_8GB, c, p, kv=kv),
                  LAPTOP_8GB, LLAMA_8B.context_max, 2048, 1, lambda fit, ctx, t: "",
                  kv_types=KV_TYPES, kv_cache="q4_0")
