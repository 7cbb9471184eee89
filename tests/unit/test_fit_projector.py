"""The fit model with a vision projector (app/fit/projector.py): its weights, its encoder's
compute buffer and one image's tokens, for registry variants (the registry's numbers) and for
installed models (the projector file's own clip.vision.* header). Numbers worked out by hand
from the formula in the module's docstring."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.fit import estimate, fits_for, plan_for
from app.fit.base import MIN_CONTEXT
from app.fit.projector import compute_bytes, file_cost, image_tokens, registry_cost
from app.gui.model_choices import installed_fit
from app.registry import Vision, load_registry
from app.store import InstalledModel, Store
from tests.support.hub_repos import model_gguf, projector_gguf
from tests.support.machines import GPU_6GB, LAPTOP_8GB, LLAMA_8B, desktop, profile

MiB = 2**20
GEMMA3 = Vision(image_size=896, patch_size=14, hidden=1152, ffn=4304, layers=27, merge=4)
# Qwen3.5-2B's encoder (llama.cpp's qwen3vl_merger, as Qwen3-VL 2B/4B's): llama.cpp logged
# "alloc_compute_meta: CPU compute buffer size = 223.30 MiB" after a 1472 x 1472 warmup
QWEN3VL = Vision(image_size=768, patch_size=16, hidden=1024, ffn=4096, layers=24, merge=2,
                 dynamic=True)


def test_gemma_3_s_encoder_buffer_and_image_tokens_by_hand():
    # 64 x 64 = 4,096 patches x (4,304 + 3 x 1,152) x 4 bytes; pooled to 16 x 16 tokens
    assert compute_bytes(GEMMA3) == 4096 * 7760 * 4 == 127_139_840
    assert image_tokens(GEMMA3) == 256
    # SmolVLM's 512 / 16 = 32 patches a side, 4 x 4 merged: 64 tokens a tile
    assert image_tokens(Vision(512, 16, 768, 3072, 12, merge=4)) == 64


def test_a_dynamic_encoder_is_sized_at_llama_cpps_warmup_and_near_what_it_logged():
    # 46 x 46 merged tokens = 92 x 92 patches
    assert compute_bytes(QWEN3VL, dynamic=True) == 8464 * (4096 + 3 * 1024) * 4
    assert compute_bytes(QWEN3VL, dynamic=True) / (223.30 * MiB) == pytest.approx(1.0, abs=0.05)
    assert image_tokens(QWEN3VL) == 576  # (768 / 32)^2 at the encoder's nominal size


def test_the_projector_adds_its_weights_and_buffer_to_what_must_fit():
    variant = LLAMA_8B.variants[0]
    proj = registry_cost(load_registry().get("gemma-3-4b-it").variant("Q4_K_M").mmproj)
    assert proj.weights == 851_251_104 and proj.compute == 127_139_840
    plain = estimate(LLAMA_8B.id, LLAMA_8B.arch, LLAMA_8B.params, variant, LAPTOP_8GB, 4096)
    seeing = estimate(LLAMA_8B.id, LLAMA_8B.arch, LLAMA_8B.params, variant, LAPTOP_8GB, 4096,
                      projector=proj)
    assert seeing.memory.total - plain.memory.total == proj.total
    assert seeing.memory.projector == proj.total
    assert "+ 0.98 GB vision projector" in seeing.explain()
    assert seeing.headroom_bytes == plain.headroom_bytes - proj.total


def test_on_a_discrete_gpu_the_projector_takes_gpu_memory_and_so_layers():
    variant = LLAMA_8B.variants[0]
    proj = registry_cost(load_registry().get("gemma-3-4b-it").variant("Q4_K_M").mmproj)
    plain = estimate(LLAMA_8B.id, LLAMA_8B.arch, LLAMA_8B.params, variant, GPU_6GB, 4096)
    seeing = estimate(LLAMA_8B.id, LLAMA_8B.arch, LLAMA_8B.params, variant, GPU_6GB, 4096,
                      projector=proj)
    assert plain.placement == seeing.placement == "partial"
    assert seeing.gpu_layers < plain.gpu_layers  # the projector's GB pushed layers off
    assert seeing.gpu_bytes <= 5_800_000_000


def test_registry_fits_count_the_projector_and_one_images_tokens():
    spec = load_registry().get("gemma-3-4b-it")
    fits = {(f.format, f.quant): f for f in fits_for(spec, desktop(), context=4096)}
    proj = registry_cost(spec.variant("Q4_K_M").mmproj)
    gguf = fits[("gguf", "Q4_K_M")]
    assert gguf.memory.projector == proj.total and gguf.context == 4096 + 256
    text_only = fits_for(load_registry().get("gemma-3-1b-it"), desktop(), context=4096)
    assert all(f.memory.projector == 0 and f.context == 4096 for f in text_only)


def test_an_installed_models_plan_reads_its_projectors_header(tmp_path, isolated_home):
    store = Store(isolated_home)
    folder = store.paths.models / "o" / "Seeing-GGUF"
    folder.mkdir(parents=True)
    model_gguf(folder / "Seeing-Q8_0.gguf", quant="Q8_0")
    projector_gguf(folder / "mmproj-Seeing-f16.gguf", image_size=1024, patch_size=14,
                   hidden=1280, ffn=3420, layers=32, projector_type="qwen2.5vl_merger")
    installed = store.import_gguf(folder / "Seeing-Q8_0.gguf")
    model = replace(installed, path=folder / "Seeing-Q8_0.gguf",
                    projector_file="mmproj-Seeing-f16.gguf")
    cost = file_cost(model.projector)
    assert cost.weights == (folder / "mmproj-Seeing-f16.gguf").stat().st_size
    assert cost.compute == 8464 * (3420 + 3 * 1280) * 4  # a Qwen2.5-VL encoder's warmup
    assert cost.image_tokens == (1024 // 28) ** 2 == 1296
    with_proj = plan_for(model, "llamacpp", desktop(), context=4096)
    without = plan_for(replace(model, projector_file=""), "llamacpp", desktop(), context=4096)
    assert with_proj.memory_bytes - without.memory_bytes == cost.total
    assert "vision projector (1296 tokens an image)" in with_proj.reason


def test_the_context_is_not_cut_below_one_image(tmp_path, isolated_home):
    folder = tmp_path / "m"
    folder.mkdir()
    model_gguf(folder / "Seeing-Q8_0.gguf", quant="Q8_0", weights=64 * 64)
    projector_gguf(folder / "mmproj-x.gguf")
    store = Store(isolated_home)
    model = store.import_gguf(folder / "Seeing-Q8_0.gguf")
    proj = model.path.parent / "mmproj-x.gguf"
    proj.write_bytes((folder / "mmproj-x.gguf").read_bytes())
    tiny = profile(2**30, 1.0, 2, 10)  # no room for anything: the plan cuts all it may
    plain = plan_for(model, "llamacpp", tiny, context=8192)
    seeing = plan_for(replace(model, projector_file="mmproj-x.gguf"), "llamacpp", tiny,
                      context=8192)
    assert plain.context == MIN_CONTEXT
    assert seeing.context == MIN_CONTEXT + 256  # one Gemma 3 image and a short turn


def test_the_pickers_badge_counts_a_projector_only_where_one_is_installed(tmp_path):
    folder = tmp_path / "unsloth" / "gemma-3-4b-it-GGUF"
    folder.mkdir(parents=True)
    projector_gguf(folder / "mmproj-model-f16.gguf")
    gemma = InstalledModel("gemma-3-4b-it", "Q4_K_M", "gguf", folder / "gemma-3-4b-it-Q4_K_M.gguf",
                           0, "", "gemma3", 131072, True, "registry", 0.0)
    blind = installed_fit(gemma, desktop())
    seeing = installed_fit(replace(gemma, projector_file="mmproj-model-f16.gguf"), desktop())
    assert blind is not None and seeing is not None
    assert blind.memory.projector == 0 and seeing.memory.projector == 851_251_104 + 127_139_840
