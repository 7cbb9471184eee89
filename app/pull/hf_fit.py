"""The fit of a Hub repo's quantizations before any download, as a registry model gets it.

A GGUF's numbers (layers, heads, context, every tensor's type and size) come from its header,
read with Range requests (app.pull.remote_gguf); a split GGUF's parts are read and merged. An
MLX or safetensors repo's come from its config.json. They go through the same fit model as a
registry model's variants (app.fit: the cuda engine's where it runs models here, llama.cpp's
otherwise), and the recommendation follows the registry's rule (app.fit.recommend.choose).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from app.fit.base import DEFAULT_CONTEXT, Fit
from app.fit.cuda import estimate_cuda
from app.fit.estimate import BITS_PER_WEIGHT, arch_from_gguf, estimate, file_estimate
from app.fit.mlx import arch_from_mlx_config, mlx_quant
from app.fit.projector import ProjectorCost, cost
from app.fit.recommend import choose
from app.gguf_file import GGUFInfo, merge_parts
from app.hardware import HardwareProfile
from app.pull import hf_hub
from app.pull.hf_repo import Quant, RepoListing
from app.pull.remote_gguf import _get_range, read_remote_gguf
from app.registry import Variant
from backends.errors import EmberError

MAX_CONFIG_BYTES = 4 << 20
READERS = 8  # headers read at once


@dataclass(frozen=True)
class QuantFit:
    quant: Quant
    fit: Fit | None  # None: the header or config could not be read (`error` says why)
    error: str | None = None
    header_bytes: int = 0  # bytes of the repo read to fit it (headers, config.json)
    requests: int = 0
    info: GGUFInfo | None = None


def gguf_fit(name: str, info: GGUFInfo, quant: str, hw: HardwareProfile,
             context: int | None = None, projector: ProjectorCost | None = None) -> Fit:
    """A GGUF's fit from its header, as app.fit.recommend.fits_for sizes registry variants;
    `projector`: the repo's vision projector, which the pull brings with it."""
    ctx = min(context or DEFAULT_CONTEXT, info.context_length)
    if hw.has_nvidia and hw.torch_cuda is not None:
        variant = Variant("gguf", quant, info.path.name, info.file_size, None, ())
        return estimate_cuda(name, arch_from_gguf(info), info.params, variant, hw, ctx)
    return replace(file_estimate(info, hw, ctx, projector=projector), model=name, quant=quant)


def config_fit(name: str, config: dict, quant: Quant, hw: HardwareProfile,
               context: int | None = None) -> Fit:
    """An MLX or safetensors directory's fit from its config.json and weight bytes."""
    arch = arch_from_mlx_config(config)
    weights = sum(f.size for f in quant.files if f.name.endswith(".safetensors"))
    q = mlx_quant(config)
    params = int(weights * 8 / BITS_PER_WEIGHT.get(q, 16.0))
    trained = int(config.get("max_position_embeddings") or DEFAULT_CONTEXT)
    ctx = min(context or DEFAULT_CONTEXT, trained)
    variant = Variant(quant.format, quant.name, "", weights, None, ())
    return estimate(name, arch, params, variant, hw, ctx, repacked=0)


def read_gguf_set(repo: str, q: Quant, revision: str | None) -> tuple[GGUFInfo, int, int]:
    """A GGUF quantization's header (a split one's parts merged), bytes read, requests."""
    heads = [read_remote_gguf(repo, f.name, f.size, revision, split_part=i > 0)
             for i, f in enumerate(q.files)]
    info = merge_parts([h.info for h in heads]) if len(heads) > 1 else heads[0].info
    return info, sum(h.bytes_read for h in heads), sum(h.requests for h in heads)


def read_config_json(repo: str, q: Quant, revision: str | None) -> tuple[dict, int]:
    from huggingface_hub import hf_hub_url

    entry = next((f for f in q.files if f.name == "config.json"), None)
    if entry is None or entry.size > MAX_CONFIG_BYTES:
        raise EmberError(f"hf.co/{repo}: no config.json of a sensible size")
    url = hf_hub_url(repo, entry.name, revision=revision, endpoint=hf_hub._endpoint())
    with hf_hub.hub_errors(repo, f"hf.co/{repo}/config.json"):
        raw = _get_range(url, 0, entry.size, f"hf.co/{repo}/config.json") if entry.size else b""
    try:
        config = json.loads(raw)
    except ValueError as e:
        raise EmberError(f"hf.co/{repo}/config.json is not valid JSON ({e})") from e
    if not isinstance(config, dict):
        raise EmberError(f"hf.co/{repo}/config.json is not a JSON object")
    return config, len(raw)


def fit_quant(listing: RepoListing, q: Quant, hw: HardwareProfile,
              context: int | None = None) -> QuantFit:
    name = listing.repo
    try:
        if q.format == "gguf":
            info, nbytes, requests = read_gguf_set(listing.repo, q, listing.sha)
            # the projector's bytes from the listing (its header is not read: its encoder's
            # buffer and image tokens count once it is installed, app.fit.projector)
            mmproj = listing.projector()
            projector = cost(mmproj.size, None) if mmproj is not None else None
            return QuantFit(q, gguf_fit(name, info, q.name, hw, context, projector), None,
                            nbytes, requests, info)
        config, nbytes = read_config_json(listing.repo, q, listing.sha)
        return QuantFit(q, config_fit(name, config, q, hw, context), None, nbytes, 1)
    except EmberError as e:  # one bad file (a stranger's header) does not hide the others
        return QuantFit(q, None, str(e))


def fit_repo(listing: RepoListing, hw: HardwareProfile,
             context: int | None = None) -> list[QuantFit]:
    """Every quantization's fit, headers read in parallel; in the listing's order."""
    if not listing.quants:
        return []
    with ThreadPoolExecutor(max_workers=min(READERS, len(listing.quants))) as pool:
        return list(pool.map(lambda q: fit_quant(listing, q, hw, context), listing.quants))


def recommended(fits: list[QuantFit], hw: HardwareProfile) -> QuantFit | None:
    """The registry's recommendation rule over a repo's quantizations (bits per weight from
    each file's own parameter count)."""
    by_name = {f.quant.name: f for f in fits if f.fit is not None}

    def quality(fit: Fit) -> float:
        qf = by_name[fit.quant]
        params = qf.info.params if qf.info is not None else 0
        return qf.quant.size * 8 / params if params else BITS_PER_WEIGHT.get(fit.quant, 16.0)

    best = choose([f.fit for f in by_name.values() if f.fit is not None], hw, quality)
    return by_name[best.quant] if best is not None else None
