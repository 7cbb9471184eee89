"""The fit model of MLA attention and of a MoE with shared experts and a leading dense layer
(llama.cpp's deepseek2: GLM-4.7-Flash, DeepSeek-V2-Lite). Every number is worked out here by
hand from the models' config.json numbers (models.yaml's glm-4.7-flash entry) and the
llama.cpp that llama-cpp-python 0.3.36 vendors. A real load is out of reach (a 30B model):
these check the formulas against llama.cpp's accounting, not a measured run."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from app.fit.cuda import estimate_cuda
from app.fit.estimate import active_share, arch_from_gguf, estimate, file_estimate, kv_cache_bytes
from app.fit.offload import kv_split
from app.gguf_file import read_gguf
from app.registry import load_registry
from tests.support.machines import RTX_4090, desktop

GLM = load_registry().get("glm-4.7-flash")
# llama.cpp caches, per token and layer, one K row of n_embd_k_gqa = n_head_kv x key_length =
# 1 x (kv_lora_rank 512 + n_rot 64) values (src/llama-hparams.cpp n_embd_k_gqa; the GGUF's
# key_length from conversion/deepseek.py), and no V: src/llama-kv-cache.cpp allocates V only
# where !is_mla (`const bool has_v = !is_mla;`), and src/llama-graph.cpp reads V as a view of K
GLM_CELL = 512 + 64


@pytest.mark.parametrize("context", [4096, 32768, 202752])
def test_mla_caches_one_latent_and_rope_key_row_a_layer_and_no_v(context):
    assert kv_cache_bytes(GLM.arch, context) == 47 * GLM_CELL * 2 * context
    # q8_0: 576 values are 18 blocks of 32, 34 bytes each
    assert kv_cache_bytes(GLM.arch, context, kv="q8_0") == 47 * 18 * 34 * context
    assert kv_cache_bytes(GLM.arch, context, parallel=2) == 2 * 47 * GLM_CELL * 2 * context
    # the decompressed heads would be 2 x 20 x 256 values a layer, 17.8 times as many
    assert 47 * 2 * 20 * 256 * 2 * context > 17 * kv_cache_bytes(GLM.arch, context)


def test_a_partial_offload_splits_the_mla_cache_by_layer():
    gpu, cpu = kv_split(GLM.arch, 8192, 20)
    assert (gpu, cpu) == (20 * GLM_CELL * 2 * 8192, 27 * GLM_CELL * 2 * 8192)


def test_only_the_routed_experts_not_chosen_go_unread():
    # 46 MoE layers (the first is dense) x 60 of 64 routed experts x 3 x 2048 x 1536; the
    # shared expert, the dense layer, attention and embeddings are read whole
    unused = 46 * 60 * 3 * 2048 * 1536
    assert active_share(GLM.arch, GLM.params) == pytest.approx(1 - unused / GLM.params)
    # 3.90B of 29.94B read a token: the published "30B-A3B" with both embeddings counted
    assert 3.89e9 < active_share(GLM.arch, GLM.params) * GLM.params < 3.91e9


def test_a_moe_without_dense_layers_or_shared_experts_keeps_its_active_share():
    oss = load_registry().get("gpt-oss-20b")
    unused = 24 * 28 * 3 * 2880 * 2880  # 28 of 32 experts unread in each of 24 layers
    assert active_share(oss.arch, oss.params) == pytest.approx(1 - unused / oss.params)


def test_glm_decodes_from_its_active_weights_on_a_desktop_cpu():
    q4 = GLM.variant("Q4_K_M")
    fit = estimate(GLM.id, GLM.arch, GLM.params, q4, desktop(ram_total=64 * 2**30,
                                                            ram_available=60 * 2**30,
                                                            cpu_bandwidth_gbps=60.0), 8192)
    assert fit.placement == "cpu"
    assert fit.memory.kv_cache == 47 * GLM_CELL * 2 * 8192
    # a token reads the active share of the file's 18.31 GB but the input embedding (a row of
    # it), and the KV cache at the typical fill of 1,024 tokens: 2.24 GB, so 0.5 x 60 GB/s over
    # it is 13.4 tokens/s, where a dense 30B of that size would make 1.6
    size = 18_312_339_776
    embedding = 154880 * 2048 * size / GLM.params
    read = size * active_share(GLM.arch, GLM.params) - embedding + 47 * GLM_CELL * 2 * 1024
    assert fit.decode_tokens_per_s == round(0.5 * 60e9 / read, 1) == 13.4


MLA_CACHE = (1, 512 + 64, 512)  # head_count_kv, key_length, value_length of an MLA file


def deepseek2_gguf(path: Path, *, q_lora: int | None, layers: int, nextn: int = 0,
                   attention: tuple[int, int, int] = MLA_CACHE, mla: bool = True) -> Path:
    """A deepseek2 header as llama.cpp's converter writes it (conversion/deepseek.py,
    conversion/glm.py), with the gguf package's own key names, and two tiny tensors."""
    writer = gguf.GGUFWriter(str(path), "deepseek2")
    writer.add_context_length(202752)
    writer.add_block_count(layers + nextn)
    if nextn:
        writer.add_nextn_predict_layers(nextn)
    writer.add_embedding_length(2048)
    writer.add_feed_forward_length(10240)
    writer.add_head_count(20)
    writer.add_head_count_kv(attention[0])
    writer.add_leading_dense_block_count(1)
    writer.add_vocab_size(154880)
    if q_lora:
        writer.add_q_lora_rank(q_lora)
    writer.add_kv_lora_rank(512)
    writer.add_key_length(attention[1])
    writer.add_value_length(attention[2])
    if mla:
        writer.add_key_length_mla(192 + 64)
        writer.add_value_length_mla(256)
    writer.add_expert_feed_forward_length(1536)
    writer.add_expert_count(64)
    writer.add_expert_used_count(4)
    writer.add_expert_shared_count(1)
    writer.add_rope_dimension_count(64)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(154880)])
    writer.add_tensor("token_embd.weight", np.zeros((4, 2048), dtype=np.float32))
    writer.add_tensor("output.weight", np.zeros((4, 2048), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_glm_flash_gguf_header_gives_the_registry_arch(tmp_path):
    info = read_gguf(deepseek2_gguf(tmp_path / "glm.gguf", q_lora=768, layers=47))
    assert arch_from_gguf(info) == GLM.arch
    assert info.kv_bytes_per_token == 47 * GLM_CELL * 2
    fit = file_estimate(info, desktop(), 8192)
    assert fit.memory.kv_cache == 47 * GLM_CELL * 2 * 8192


def test_a_nextn_block_in_the_file_is_neither_a_layer_nor_cached(tmp_path):
    # llama.cpp's main context runs and caches n_layer() = block_count - nextn_predict_layers
    # layers (src/llama-hparams.cpp; the layer filter in src/llama-model.cpp create_memory)
    info = read_gguf(deepseek2_gguf(tmp_path / "mtp.gguf", q_lora=768, layers=47, nextn=1))
    assert arch_from_gguf(info).layers == 47
    assert info.kv_bytes_per_token == 47 * GLM_CELL * 2


def test_a_deepseek2_gguf_without_a_query_lora_has_a_full_query(tmp_path):
    # DeepSeek-V2-Lite's shape of header: no q_lora_rank key (llama.cpp: is_lite)
    info = read_gguf(deepseek2_gguf(tmp_path / "lite.gguf", q_lora=None, layers=27))
    arch = arch_from_gguf(info)
    assert (arch.q_lora_rank, arch.kv_lora_rank, arch.rope_head_dim) == (None, 512, 64)
    assert kv_cache_bytes(arch, 1000) == 27 * GLM_CELL * 2 * 1000


def test_an_old_deepseek2_gguf_without_the_mla_keys_is_sized_as_llama_cpp_runs_it(tmp_path):
    # DeepSeek-V2-Lite as converters wrote it before the _mla keys: 16 KV heads of key_length
    # 192 (nope 128 + rope 64) and value_length 128; llama.cpp's is_mla() is false, so it
    # caches K and V of every head
    info = read_gguf(deepseek2_gguf(tmp_path / "old.gguf", q_lora=None, layers=27,
                                    attention=(16, 192, 128), mla=False))
    arch = arch_from_gguf(info)
    assert (arch.kv_lora_rank, arch.kv_heads, arch.head_dim, arch.v_head_dim) == (
        None, 16, 192, 128)
    per_token = 27 * 16 * (192 + 128) * 2
    assert info.kv_bytes_per_token == per_token
    assert kv_cache_bytes(arch, 1000) == per_token * 1000


def test_the_cuda_fit_sizes_an_mla_arch_without_failing():
    # the cuda engine runs no deepseek2 (backends/cuda/model_config.py SUPPORTED); its fit, which
    # fits_for uses on an NVIDIA machine with torch, still gives an answer: the 30B in bf16
    # (60 GB) does not fit a 24 GB GPU
    from dataclasses import replace

    fit = estimate_cuda(GLM.id, GLM.arch, GLM.params, GLM.variant("Q4_K_M"),
                        replace(RTX_4090, torch_cuda="2.13.0"), 4096)
    assert fit.placement == "wont_fit"
    assert fit.memory.weights > 2 * GLM.params * 0.99
