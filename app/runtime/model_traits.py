"""What an installed model can do, read from its files without loading it: its chat template,
its metadata, and the capabilities Ollama's /api/show lists (`completion`, `tools`,
`thinking`, `vision`, `embedding`), which clients gate features on.

Tools and thinking come from the chat template (backends.chat_format.detect_format reads the
template, never the model's name); embedding models from their metadata. Vision needs a
projector model, which Ember does not run yet, so no model has it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from app.gguf_file import read_gguf
from app.store import InstalledModel
from backends.chat_format import detect_format
from backends.mlx_dir import read_config

# Encoder architectures that only embed (llama.cpp's names in GGUF, Hugging Face's
# model_type in config.json); a decoder fine-tuned for embeddings has a pooling type instead.
ENCODERS = frozenset({"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3",
                      "modern-bert", "neo-bert", "t5encoder", "xlm-roberta", "nomic_bert",
                      "modernbert"})


@dataclass(frozen=True)
class ModelTraits:
    template: str | None
    metadata: dict[str, str | int | float | bool]  # scalar metadata (no tokenizer tables)
    embedding: bool  # an embedding model: it embeds, and does not complete text

    @property
    def capabilities(self) -> list[str]:
        if self.embedding:
            return ["embedding"]
        fmt = detect_format(self.template)
        caps = ["completion"]
        if self.template is not None:
            caps.append("chat")  # Ember's own: the model takes conversations
        if fmt.tools != "none":
            caps.append("tools")
        if fmt.thinking is not None or fmt.harmony:
            caps.append("thinking")
        return caps


def model_traits(model: InstalledModel) -> ModelTraits:
    if model.format == "mlx":
        return _mlx_traits(model.path)
    info = read_gguf(model.path)
    metadata = {k: v for k, v in info.metadata.items()
                if isinstance(v, str | int | float | bool) and not k.startswith("tokenizer.")}
    embedding = (info.architecture in ENCODERS
                 or info.arch_value("pooling_type") is not None)
    return ModelTraits(info.chat_template, metadata, embedding)


def _mlx_traits(folder: Path) -> ModelTraits:
    config = read_config(folder)
    metadata = {k: v for k, v in config.items() if isinstance(v, str | int | float | bool)}
    return ModelTraits(_mlx_template(folder), metadata,
                       str(config.get("model_type", "")).lower() in ENCODERS)


def _mlx_template(folder: Path) -> str | None:
    """tokenizer_config.json's chat template, or chat_template.jinja (newer repos), as the
    MLX backend reads it (backends.mlx.tokenizer)."""
    if (folder / "chat_template.jinja").is_file():
        return (folder / "chat_template.jinja").read_text(encoding="utf-8")
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    template = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(template, list):  # several named templates: the default one
        template = next((t.get("template") for t in template
                         if isinstance(t, dict) and t.get("name") == "default"), None)
    return template if isinstance(template, str) and template else None
