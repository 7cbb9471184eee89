"""The fit model's vision projector terms: what a model's `mmproj*.gguf` (llama.cpp's mtmd,
its clip encoder) adds to a load. Three things: its weights (the file's bytes), the encoder's
compute buffer, and the tokens one image takes of the language model's context.

Compute buffer, with flash attention (mtmd's default where the backend has it; llama.cpp
logs "warmup: flash attention is enabled" on CPU and CUDA alike): ggml's allocator keeps a
layer's live activations, the widest being the MLP's, so

    bytes = positions x (ffn + 3 x hidden) x 4 (float32)

where positions are the patches of the image the encoder is warmed up with: the fixed
resolution's (image_size / patch_size)^2, or for a dynamic-resolution encoder (Qwen2-VL,
Qwen2.5-VL, Qwen3-VL) llama.cpp's warmup of 46 x 46 merged tokens, (46 x merge)^2 patches
(a 1472 x 1472 image at patch 16, merge 2). Against what llama.cpp printed
(docs/notes/fit-model.md, "Vision projectors"): Qwen3.5-2B's encoder (hidden 1024, ffn 4096)
231 MiB predicted, 223 MiB logged; Qwen3.6-27B's (1152, 4304) 251 MiB, 248 MiB on CUDA.
Without flash attention each layer's attention scores, heads x positions^2 x 4 bytes, would
come on top (1 GiB for Gemma 3's 4096 positions): not counted.

Image tokens: (image_size / (patch_size x merge))^2 for an image at the encoder's own
resolution (Gemma 3: 896 / (14 x 4) = 16, 256 tokens; SmolVLM-256M: 512 / (16 x 4) = 8, 64);
a dynamic-resolution model's larger image costs more (an assumption: one image at its
nominal image_size).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from app.gguf_file import GGUFInfo, read_gguf
from app.registry import Projector, Vision
from backends.errors import ModelFileError

log = logging.getLogger(__name__)
WARMUP_TOKENS_SIDE = 46  # llama.cpp clip.cpp: set_warmup_n_tokens(46 * 46) for Qwen-VL encoders
# llama.cpp's projector types whose encoder takes the image at its own size
DYNAMIC_PROJECTORS = frozenset({"qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger"})
# projectors that pool patches without a merge key in the file (clip.cpp: Gemma 3 pools its
# 64 x 64 patches to 16 x 16)
POOLING = {"gemma3": 4}


@dataclass(frozen=True)
class ProjectorCost:
    weights: int  # the projector file's bytes
    compute: int  # the encoder's compute buffer
    image_tokens: int  # one image at the encoder's resolution, in the model's context

    @property
    def total(self) -> int:
        return self.weights + self.compute

    def describe(self) -> str:
        return (f"{self.total / 1e9:.2f} GB vision projector ({self.image_tokens} tokens "
                "an image)")


def positions(v: Vision, dynamic: bool) -> int:
    """The patches of the image the encoder's compute buffer is sized for."""
    if dynamic:
        return (WARMUP_TOKENS_SIDE * max(v.merge, 1)) ** 2
    return (v.image_size // v.patch_size) ** 2


def compute_bytes(v: Vision, dynamic: bool = False) -> int:
    return positions(v, dynamic) * (v.ffn + 3 * v.hidden) * 4


def image_tokens(v: Vision) -> int:
    return (v.image_size // (v.patch_size * max(v.merge, 1))) ** 2


def cost(weights: int, v: Vision | None, dynamic: bool = False) -> ProjectorCost:
    """A projector of `weights` bytes; without its vision numbers only the weights count."""
    if v is None:
        return ProjectorCost(weights, 0, 0)
    return ProjectorCost(weights, compute_bytes(v, dynamic), image_tokens(v))


def registry_cost(p: Projector) -> ProjectorCost:
    """A registry variant's projector, from the registry's numbers (no file at hand)."""
    return cost(p.size_bytes, p.vision, p.vision is not None and p.vision.dynamic)


def _int(info: GGUFInfo, key: str, default: int = 0) -> int:
    value = info.metadata.get(key, default)
    return int(value) if isinstance(value, int | float) else default


def vision_from_gguf(info: GGUFInfo) -> tuple[Vision | None, bool]:
    """The clip.vision.* numbers of a projector file, and whether its encoder takes images
    at their own size; (None, False) for a file without a vision encoder (audio only)."""
    image_size = _int(info, "clip.vision.image_size")
    patch = _int(info, "clip.vision.patch_size")
    if not image_size or not patch:
        return None, False
    kind = str(info.metadata.get("clip.vision.projector_type")
               or info.metadata.get("clip.projector_type") or "")
    merge = (_int(info, "clip.vision.spatial_merge_size")
             or _int(info, "clip.vision.projector.scale_factor") or POOLING.get(kind, 1))
    hidden = _int(info, "clip.vision.embedding_length")
    vision = Vision(image_size=image_size, patch_size=patch, hidden=hidden,
                    ffn=_int(info, "clip.vision.feed_forward_length", 4 * hidden),
                    layers=_int(info, "clip.vision.block_count"), merge=merge,
                    dynamic=kind in DYNAMIC_PROJECTORS)
    return vision, vision.dynamic


def file_cost(path: Path) -> ProjectorCost:
    """An installed projector, from its own header (app.gguf_file.read_gguf). One Ember cannot
    read counts as its bytes only: the text model still loads, and mtmd names what is wrong
    with it when an image comes."""
    try:
        info = read_gguf(path, check_architecture=False)  # "clip": no language model's name
    except ModelFileError as e:
        log.warning("the vision projector %s is unreadable (%s); counting its bytes only",
                    path, e)
        return cost(path.stat().st_size, None)
    vision, dynamic = vision_from_gguf(info)
    return cost(info.file_size, vision, dynamic)
