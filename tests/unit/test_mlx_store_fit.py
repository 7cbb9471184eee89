"""MLX models in the store and the fit model, without running one: directory models are
listed, checked and removed like files; memory follows the unified-memory rules."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from app.fit import estimate, fits_for, recommend
from app.fit.mlx import arch_from_mlx_config, mlx_quant, plan_mlx_load
from app.hardware import GPU, HardwareProfile, gpu_wired_bytes
from app.registry import load_registry
from app.store import InstalledModel, Store

GiB = 2**30
QWEN_05B_CONFIG = {
    "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
    "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
    "vocab_size": 151936, "max_position_embeddings": 32768, "tie_word_embeddings": True,
    "quantization": {"group_size": 64, "bits": 4, "mode": "affine"},
}


def mac(ram: int, wired: int) -> HardwareProfile:
    return HardwareProfile(os="Darwin", machine="arm64", cpu="Apple M2", physical_cores=8,
                           logical_cores=8, isa=("neon",), ram_total=ram,
                           ram_available=int(ram * 0.8),
                           gpus=(GPU("Apple M2 GPU", "apple", wired, wired, None, 100),),
                           apple_chip="M2", cpu_bandwidth_gbps=100)


def make_mlx_dir(folder: Path, weights: int = 1000) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(QWEN_05B_CONFIG))
    (folder / "model.safetensors").write_bytes(b"\0" * weights)
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_wired_limit_sysctl_overrides_the_default_gpu_share():
    assert gpu_wired_bytes(16 * GiB) == int(16 * GiB * 0.67)
    assert gpu_wired_bytes(64 * GiB) == int(64 * GiB * 0.75)
    assert gpu_wired_bytes(64 * GiB, "57344") == 56 * GiB
    assert gpu_wired_bytes(16 * GiB, "0") == int(16 * GiB * 0.67)  # 0 means the default
    assert gpu_wired_bytes(16 * GiB, "999999") == 16 * GiB  # never more than the RAM


def test_mlx_4bit_memory_is_the_weights_plus_the_kv_cache_on_unified_memory():
    spec = load_registry().get("qwen2.5-coder-0.5b-instruct")
    variant = spec.variant("4bit", "mlx")
    fit = estimate(spec.id, spec.arch, spec.params, variant, mac(16 * GiB, 10 * GiB), 4096)
    assert fit.placement == "full_gpu" and fit.format == "mlx"
    assert fit.memory.weights == variant.size_bytes
    # 2 (K, V) x 2 heads x 64 x 2 bytes x 24 layers x 4,096 tokens
    assert fit.memory.kv_cache == 2 * 2 * 64 * 2 * 24 * 4096
    # a wired limit below the model leaves it unable to run on the GPU
    assert estimate(spec.id, spec.arch, spec.params, variant, mac(16 * GiB, 100 << 20),
                    4096).placement != "full_gpu"


def test_registry_lists_4bit_and_8bit_mlx_variants_as_directories(isolated_home):
    spec = load_registry().get("qwen2.5-coder-0.5b-instruct")
    quants = {v.quant for v in spec.variants if v.format == "mlx"}
    assert quants == {"4bit", "8bit"}
    target = Store().target_path(spec, spec.variant("4bit", "mlx"))
    assert target.parts[-2:] == ("mlx-community", "Qwen2.5-Coder-0.5B-Instruct-4bit")


def test_mlx_config_gives_the_architecture_and_quantization():
    arch = arch_from_mlx_config(QWEN_05B_CONFIG)
    assert (arch.layers, arch.kv_heads, arch.head_dim, arch.vocab) == (24, 2, 64, 151936)
    assert mlx_quant(QWEN_05B_CONFIG) == "4bit"


def test_a_directory_model_is_listed_checked_and_removed(isolated_home, tmp_path):
    store = Store()
    built = make_mlx_dir(tmp_path / "built")
    model = store.install_directory(built, "tiny-mlx", "4bit", "mlx", "qwen2", 32768, True,
                                    origin="converted")
    assert model.path.is_dir() and not built.exists()
    assert store.get("tiny-mlx:4bit") == model and model.size_bytes > 1000
    (model.path / "model.safetensors").write_bytes(b"\0" * 10)  # damaged: no longer listed
    assert store.list() == []
    (model.path / "model.safetensors").write_bytes(b"\0" * 1000)
    assert store.remove("tiny-mlx:4bit").ref == "tiny-mlx:4bit"
    assert not model.path.exists() and store.list() == []


def test_load_plan_for_an_mlx_directory_counts_float32_kv_on_the_cpu(isolated_home, tmp_path):
    folder = make_mlx_dir(tmp_path / "m", weights=2000)
    model = InstalledModel("m", "4bit", "mlx", folder, 0, "", "qwen2", 32768, True, "converted",
                           0.0)
    cpu = HardwareProfile(os="Linux", machine="x86_64", cpu="x", physical_cores=2,
                          logical_cores=2, isa=("avx2",), ram_total=16 * GiB,
                          ram_available=8 * GiB, gpus=(), cpu_bandwidth_gbps=20)
    plan = plan_mlx_load(QWEN_05B_CONFIG, model, cpu, context=2048)
    assert plan.context == 2048 and "MLX on CPU" in plan.reason
    on_mac = plan_mlx_load(QWEN_05B_CONFIG, model, mac(16 * GiB, 10 * GiB), context=2048)
    # K and V: 2 x 2 heads x 64 x 24 layers x 2,048 tokens x 4 bytes (float32) or 2 (Metal)
    assert "0.05 GB KV at 2k" in plan.reason and "0.03 GB KV at 2k" in on_mac.reason
    assert on_mac.gpu_layers == -1 and "Metal" in on_mac.reason


LINUX_CPU = HardwareProfile(os="Linux", machine="x86_64", cpu="x", physical_cores=8,
                            logical_cores=8, isa=("avx2",), ram_total=16 * GiB,
                            ram_available=12 * GiB, gpus=(), cpu_bandwidth_gbps=40)


def test_on_apple_silicon_the_recommendation_is_the_best_fitting_mlx_variant():
    spec = load_registry().get("qwen2.5-coder-0.5b-instruct")
    on_mac = recommend(spec, mac(16 * GiB, 10 * GiB))
    assert (on_mac.format, on_mac.quant) == ("mlx", "8bit")  # the higher quality fits easily
    on_linux = recommend(spec, LINUX_CPU)
    assert (on_linux.format, on_linux.quant) == ("gguf", "Q4_K_M")
    assert {f.format for f in fits_for(spec, mac(16 * GiB, 10 * GiB))} == {"gguf", "mlx"}
    assert {f.format for f in fits_for(spec, LINUX_CPU)} == {"gguf"}


def test_apple_silicon_falls_back_to_gguf_when_no_mlx_variant_can_run():
    gemma = load_registry().get("gemma-3-270m")  # no MLX variant in the registry
    assert recommend(gemma, mac(16 * GiB, 10 * GiB)).format == "gguf"
    spec = load_registry().get("qwen2.5-coder-0.5b-instruct")
    huge = tuple(replace(v, size_bytes=200 * GiB) if v.format == "mlx" else v
                 for v in spec.variants)
    fit = recommend(replace(spec, variants=huge), mac(16 * GiB, 10 * GiB))
    assert (fit.format, fit.placement) == ("gguf", "full_gpu")


def test_pull_without_a_quantization_takes_the_mlx_variant_on_a_mac():
    from app.pull.install import resolve

    _, variant = resolve("qwen2.5-coder-0.5b-instruct", mac(16 * GiB, 10 * GiB))
    assert (variant.format, variant.quant) == ("mlx", "8bit")
    _, variant = resolve("qwen2.5-coder-0.5b-instruct", LINUX_CPU)
    assert variant.format == "gguf"


def test_ember_hw_recommends_mlx_variants_on_a_mac():
    from app.cli.models import _best_models

    best = _best_models(mac(32 * GiB, 20 * GiB))
    assert best
    for spec, fit in best:
        has_mlx = any(v.format == "mlx" for v in spec.variants)
        assert fit.format == ("mlx" if has_mlx else "gguf"), spec.id
    assert any(fit.format == "mlx" for _, fit in best)


def test_a_model_installed_as_gguf_and_mlx_runs_as_mlx_on_a_mac(isolated_home, tmp_path):
    from app.runtime import Runtime
    from tests.support.tiny_gguf import write_tiny_gguf

    store = Store()
    gguf_model = store.import_gguf(write_tiny_gguf(tmp_path / "tiny.gguf"))
    mlx_model = store.install_directory(make_mlx_dir(tmp_path / "built"), gguf_model.id,
                                        "4bit", "mlx", "qwen2", 32768, True, origin="converted")
    assert store.get(gguf_model.id, prefer="mlx") == mlx_model
    assert store.get(gguf_model.id, prefer="gguf") == gguf_model
    on_mac = Runtime(store=store, hardware=mac(16 * GiB, 10 * GiB))
    chosen = on_mac._installed(gguf_model.id)
    assert chosen == mlx_model and on_mac.choose(chosen).name == "mlx"
    on_linux = Runtime(store=store, hardware=LINUX_CPU)
    assert on_linux._installed(gguf_model.id) == store.get(gguf_model.id)  # no preference


def test_on_the_cpu_with_openblas_quantized_weights_are_unpacked_where_they_fit(
        isolated_home, tmp_path, monkeypatch):
    folder = make_mlx_dir(tmp_path / "m")
    with (folder / "model.safetensors").open("r+b") as f:
        f.truncate(300 * 10**6)  # about the 0.5B at 4 bits (sparse: nothing is written)
    model = InstalledModel("m", "4bit", "mlx", folder, 0, "", "qwen2", 32768, True, "converted",
                           0.0)
    monkeypatch.setattr("app.fit.mlx.openblas_library", lambda: "libopenblas.so.0")
    plan = plan_mlx_load(QWEN_05B_CONFIG, model, LINUX_CPU, context=2048)
    assert plan.unpack_weights and "weights unpacked to float32 for OpenBLAS" in plan.reason
    # 300 MB at 4.5 bits a weight: 533M weights, 2.13 GB in float32
    assert 2.1e9 < plan.memory_bytes < 2.6e9
    small = replace(LINUX_CPU, ram_total=2 * GiB, ram_available=int(1.5 * GiB))
    packed = plan_mlx_load(QWEN_05B_CONFIG, model, small, context=2048)
    assert not packed.unpack_weights and "unpacked" not in packed.reason
    assert packed.memory_bytes < 1e9 and packed.context == 2048
    on_mac = plan_mlx_load(QWEN_05B_CONFIG, model, mac(16 * GiB, 10 * GiB), context=2048)
    assert not on_mac.unpack_weights
    monkeypatch.setattr("app.fit.mlx.openblas_library", lambda: None)
    assert not plan_mlx_load(QWEN_05B_CONFIG, model, LINUX_CPU, context=2048).unpack_weights
