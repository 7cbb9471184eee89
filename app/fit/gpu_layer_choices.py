"""The choices of a GGUF model's GPU layers setting in the window: each number of layers a
user may offload, with the GPU memory it takes and the decode speed the fit model predicts,
and the one the load plan picks by itself (LM Studio's GPU offload slider shows the layer
count alone; here each step says what it costs and gives)."""

from __future__ import annotations

from dataclasses import dataclass

from app.fit.base import GB, Fit, speed_text
from app.fit.estimate import layer_choices, plan_load
from app.gguf_file import GGUFInfo
from app.hardware import HardwareProfile


@dataclass(frozen=True)
class GpuLayerChoice:
    value: int  # llama.cpp's n_gpu_layers, as the setting stores it (0: the CPU alone)
    label: str
    fits: bool  # False: the GPU (or the RAM, for the layers left there) cannot hold it
    planned: bool  # the choice the load plan makes when the setting is left automatic


def gpu_layer_choices(info: GGUFInfo, hw: HardwareProfile, context: int | None = None,
                      kv_cache: str | None = None) -> list[GpuLayerChoice]:
    """Every layer count from all to none, at the context (None: the plan's) and KV cache
    type (None: the plan's) the model would load with. A value is llama.cpp's n_gpu_layers:
    n repeating layers on the GPU are n + 1 (the output layer goes first), all of them
    layers + 1."""
    plan = plan_load(info, hw, context, 1, kv_cache)
    fits = layer_choices(info, hw, plan.context, plan.parallel, plan.kv_cache)
    layers = len(fits) - 1
    planned = layers + 1 if plan.gpu_layers < 0 else plan.gpu_layers
    choices = []
    for n in range(layers, -1, -1):
        value = n + 1 if n else 0
        choices.append(GpuLayerChoice(value, _label(fits[n], n, layers, value == planned),
                                      fits[n].placement != "wont_fit", value == planned))
    return choices


def _label(fit: Fit, n: int, layers: int, planned: bool) -> str:
    count = (f"all {layers} layers" if n == layers else
             f"{n} of {layers} layers" if n else "none: the CPU alone")
    if fit.placement == "wont_fit":
        needed = fit.budget_bytes - fit.headroom_bytes
        return (f"{count}: will not fit (needs {needed / GB:.2f} GB, "
                f"{fit.budget_bytes / GB:.2f} GB to spare)")
    memory = f"{fit.gpu_bytes / GB:.2f} GB on the GPU, " if n else ""
    text = f"{count}: {memory}{speed_text(fit.decode_tokens_per_s)}"
    return text + " (the plan's choice)" if planned else text
