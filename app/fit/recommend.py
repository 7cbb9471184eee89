"""Recommendations: which quantization of a registry model to suggest on this machine, from
the fit of every variant in a format that runs here (the cuda engine's own fit where it runs
the model)."""

from __future__ import annotations

from collections.abc import Callable

from app.fit.base import DEFAULT_CONTEXT, Fit
from app.fit.cuda import estimate_cuda
from app.fit.estimate import bits_per_weight, estimate, repeating_layers
from app.fit.projector import registry_cost
from app.hardware import HardwareProfile
from app.registry import ModelSpec
from app.runtime.backend_choice import preferred_format

HEADROOM = 0.10  # a recommendation leaves this share of the budget free
SPEED_SHARE = 0.75  # ... and is not much slower than the fastest variant that fits
FAST_ENOUGH = 20.0  # tokens/s: faster than people read, so quality wins


def backend_formats(hw: HardwareProfile) -> tuple[str, ...]:
    """Formats whose variants Ember offers here: GGUF (llama.cpp) everywhere, and MLX on
    Apple Silicon (mlx[cpu] also runs on Linux, but far slower than llama.cpp there)."""
    return ("gguf", "mlx") if hw.apple_chip else ("gguf",)


def fits_for(spec: ModelSpec, hw: HardwareProfile, context: int | None = None,
             parallel: int = 1, n_gpu_layers: int | None = None,
             projectors: bool = True) -> list[Fit]:
    """Each variant's fit here; `n_gpu_layers`: llama.cpp's offload a user set for the
    model (None: the plan's), so a badge says what loading it will do; `projectors`: count
    each variant's vision projector (False: an installed copy that has none beside it)."""
    ctx = min(context or min(spec.context_default, DEFAULT_CONTEXT), spec.context_max)
    formats = backend_formats(hw)
    if hw.has_nvidia and hw.torch_cuda is not None:
        # the cuda backend runs models here (app.runtime.backend_choice): size them as its engine
        # keeps them
        return [estimate_cuda(spec.id, spec.arch, spec.params, v, hw, ctx, parallel)
                for v in spec.variants if v.format in formats]
    forced = None if n_gpu_layers is None else repeating_layers(n_gpu_layers, spec.arch.layers)
    # a variant's projector counts from the registry's numbers (app.fit.projector), and one
    # image's tokens join the context it is sized at
    fits = []
    for v in (v for v in spec.variants if v.format in formats):
        proj = registry_cost(v.mmproj) if v.mmproj is not None and projectors else None
        fits.append(estimate(spec.id, spec.arch, spec.params, v, hw,
                             ctx + (proj.image_tokens if proj is not None else 0), parallel,
                             gpu_layers=forced if v.format == "gguf" else None,
                             projector=proj))
    return fits


def recommend(spec: ModelSpec, hw: HardwareProfile, context: int | None = None,
              parallel: int = 1) -> Fit | None:
    """The variant to recommend here: the highest quality (bits per weight) that fits with
    HEADROOM of its budget free and decodes at least SPEED_SHARE of the fastest fitting
    variant's speed (or FAST_ENOUGH tokens/s). If none leaves headroom, the smallest that
    fits; if none fits, the smallest (labelled "will not fit"). Only variants in the
    preferred format (app.runtime.backend_choice: MLX on Apple Silicon) compete when one of
    them runs."""
    fits = fits_for(spec, hw, context, parallel)
    variants = {(v.format, v.quant): v for v in spec.variants}
    return choose(fits, hw, lambda f: bits_per_weight(variants[(f.format, f.quant)],
                                                      spec.params))


def choose(fits: list[Fit], hw: HardwareProfile,
           quality: Callable[[Fit], float]) -> Fit | None:
    """recommend()'s rule over any set of fits (a registry model's variants, the files of a
    Hub repo), `quality` ranking them (bits per weight)."""
    if not fits:
        return None
    # the preferred format's variants (MLX on Apple Silicon) when one of them can run here
    prefer = preferred_format(hw)
    if any(f.format == prefer and f.placement != "wont_fit" for f in fits):
        fits = [f for f in fits if f.format == prefer]
    roomy = [f for f in fits if f.placement != "wont_fit"
             and f.headroom_bytes >= HEADROOM * f.budget_bytes]
    if roomy:
        fastest = max(f.decode_tokens_per_s for f in roomy)
        good = [f for f in roomy if f.decode_tokens_per_s >= SPEED_SHARE * fastest
                or f.decode_tokens_per_s >= FAST_ENOUGH]
        return max(good, key=quality)
    fitting = [f for f in fits if f.placement != "wont_fit"]
    return min(fitting or fits, key=lambda f: f.memory.total)
