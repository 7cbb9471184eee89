"""What an installed model can do, read from its files without loading it: its chat template,
its metadata, and the capabilities Ollama's /api/show lists (`completion`, `tools`,
`thinking`, `vision`, `embedding`), which clients gate features on.

Tools and thinking come from the chat template (backends.chat_format.detect_format reads the
template, never the model's name); embedding models from their metadata; vision from the
multimodal projector installed beside the model (InstalledModel.projector, its mmproj file).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from app.gguf_file import read_gguf
from app.runtime.thinking import template_of
from app.store import InstalledModel
from backends.chat_format import detect_format
from backends.errors import ModelFileError
from backends.mlx_dir import read_config

log = logging.getLogger(__name__)

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
    vision: bool = False  # a projector with a vision encoder is installed beside it
    audio: bool = False  # a projector with an audio encoder (it hears)

    @property
    def capabilities(self) -> list[str]:
        if self.embedding:
            return ["embedding"]
        fmt = detect_format(self.template)
        caps = ["completion"]
        if self.template is not None:
            caps.append("chat")  # Ember's own: the model takes conversations
        if fmt.tools not in ("none", "unknown"):  # unknown: a request with tools is refused
            caps.append("tools")
        if fmt.thinking is not None or fmt.harmony:
            caps.append("thinking")
        if self.vision:
            caps.append("vision")
        if self.audio:
            caps.append("audio")
        return caps

    @property
    def native_tools(self) -> bool:
        """Tool calls in the template's own syntax; a chat model without them gets the tools
        described in its system prompt (the "generic" format), which it may follow poorly."""
        return not self.embedding and self.template is not None \
            and detect_format(self.template).native_tools


def model_traits(model: InstalledModel) -> ModelTraits:
    if model.format == "mlx":
        return _mlx_traits(model.path)
    info = read_gguf(model.path)
    metadata = {k: v for k, v in info.metadata.items()
                if isinstance(v, str | int | float | bool) and not k.startswith("tokenizer.")}
    embedding = (info.architecture in ENCODERS
                 or info.arch_value("pooling_type") is not None)
    sees, hears = projector_senses(getattr(model, "projector", None))
    return ModelTraits(info.chat_template, metadata, embedding, vision=sees, audio=hears)


def projector_senses(path: Path | None) -> tuple[bool, bool]:
    """(sees, hears) of a projector file, from its header's clip.has_vision_encoder and
    clip.has_audio_encoder (what llama.cpp's converter writes); (False, False) without one.
    A header Ember cannot read counts as seeing, the common case: mtmd says what is wrong
    when an image comes."""
    if path is None:
        return False, False
    try:
        info = read_gguf(path, check_architecture=False)
    except ModelFileError as e:
        log.warning("the projector %s is unreadable (%s)", path, e)
        return True, False
    meta = info.metadata
    sees = bool(meta.get("clip.has_vision_encoder", False))
    hears = bool(meta.get("clip.has_audio_encoder", False))
    return (sees or not hears), hears


def _mlx_traits(folder: Path) -> ModelTraits:
    config = read_config(folder)
    metadata = {k: v for k, v in config.items() if isinstance(v, str | int | float | bool)}
    # the template as the window's Think control reads it, so the two cannot disagree
    return ModelTraits(template_of(folder, "mlx"), metadata,
                       str(config.get("model_type", "")).lower() in ENCODERS)
