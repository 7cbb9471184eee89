"""/api/show's capabilities, from a model's files: tools and thinking from what
backends.chat_format reads in the chat template, embedding from the metadata."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import gguf
import numpy as np
import pytest

from app.runtime import model_traits
from app.store import InstalledModel
from backends.chat_format import ChatFormat, ThinkingMarkers

HERMES = ("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}"
          "{# <tool_call>\n{\"name\": .. #}")
THINKER = HERMES + "{# <think> #}"
HARMONY = "{# <|channel|>analysis #}"


def fake_detect(template: str | None) -> ChatFormat:
    """What the real detection says of these templates (the test is of the mapping)."""
    template = template or ""
    return ChatFormat(
        tools="harmony" if "<|channel|>" in template
        else "hermes" if "<tool_call>" in template else "none",
        thinking=ThinkingMarkers("<think>", "</think>") if "<think>" in template else None,
        harmony="<|channel|>" in template)


@pytest.fixture(autouse=True)
def detection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_traits, "detect_format", fake_detect)


def gguf_model(path: Path, arch: str = "qwen2", template: str | None = None,
               pooling: int | None = None) -> SimpleNamespace:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_context_length(256)
    writer.add_block_count(1)
    writer.add_embedding_length(8)
    writer.add_head_count(2)
    if template is not None:
        writer.add_chat_template(template)
    if pooling is not None:
        writer.add_pooling_type(gguf.PoolingType(pooling))
    writer.add_tensor("token_embd.weight", np.zeros((8, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return SimpleNamespace(format="gguf", path=path)


@pytest.mark.parametrize(("template", "caps"), [
    (None, ["completion"]),
    ("{{ messages[0].content }}", ["completion", "chat"]),
    (HERMES, ["completion", "chat", "tools"]),
    (THINKER, ["completion", "chat", "tools", "thinking"]),
    (HARMONY, ["completion", "chat", "tools", "thinking"]),
])
def test_gguf_capabilities_follow_the_chat_template(tmp_path, template, caps):
    traits = model_traits.model_traits(gguf_model(tmp_path / "m.gguf", template=template))
    assert traits.capabilities == caps and traits.template == template
    assert traits.metadata["qwen2.context_length"] == 256


def test_embedding_models_embed_and_do_not_complete(tmp_path):
    encoder = gguf_model(tmp_path / "bert.gguf", arch="bert", template=HERMES)
    assert model_traits.model_traits(encoder).capabilities == ["embedding"]
    pooled = gguf_model(tmp_path / "qwen3-embed.gguf", arch="qwen3", pooling=1)
    assert model_traits.model_traits(pooled).capabilities == ["embedding"]


def test_mlx_directory_reads_its_template_from_the_tokenizer_config(tmp_path):
    folder = tmp_path / "mlx"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2", "vocab_size": 9}))
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": THINKER}))
    traits = model_traits.model_traits(SimpleNamespace(format="mlx", path=folder))
    assert traits.capabilities == ["completion", "chat", "tools", "thinking"]
    assert traits.metadata == {"model_type": "qwen2", "vocab_size": 9}
    (folder / "chat_template.jinja").write_text("{{ messages }}")  # newer repos: its own file
    assert model_traits.model_traits(SimpleNamespace(format="mlx", path=folder)
                                     ).capabilities == ["completion", "chat"]


def installed(path: Path, projector_file: str = "") -> InstalledModel:
    return InstalledModel(id="tiny", quant="F32", format="gguf", path=path, size_bytes=1,
                          sha256="", architecture="qwen2", context_length=256, chat=True,
                          origin="import", installed_at=0.0, projector_file=projector_file)


def test_a_model_with_its_projector_installed_beside_it_has_vision(tmp_path):
    gguf_model(tmp_path / "m.gguf", template="{{ messages[0].content }}")
    (tmp_path / "mmproj-m.gguf").write_bytes(b"GGUF")
    seeing = model_traits.model_traits(installed(tmp_path / "m.gguf", "mmproj-m.gguf"))
    assert seeing.capabilities == ["completion", "chat", "vision"]
    # a projector named in the manifest but not there (removed by hand) is no vision
    gone = model_traits.model_traits(installed(tmp_path / "m.gguf", "mmproj-gone.gguf"))
    assert gone.capabilities == ["completion", "chat"]
    assert model_traits.model_traits(installed(tmp_path / "m.gguf")).capabilities == [
        "completion", "chat"]
