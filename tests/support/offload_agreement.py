"""Teacher-forced next-token agreement of a GGUF model with N layers offloaded, against the
CPU: one process loads the model once per layer count, evaluates the same text in one batch
with every position's logits, and prints each position's top token per count as JSON, how
far below the CPU's top logit each count's top token is (its gap: 0 where they agree), and
the bytes llama.cpp put on each device for a load as Ember makes it (context 1024, the
backend's own context parameters): its logged model, KV and compute buffers. Count 0 is the
CPU alone (no op offload), as Ember loads it.

    python -m tests.support.offload_agreement MODEL.gguf TEXT_FILE 0 12 load:-1

A count written `load:N` is only loaded, for its buffers, not evaluated: on lavapipe each
evaluated count is a minute or more of the CPU's time.

Run as a child: the GPU backends are loaded here (backends.llamacpp.ggml_backends, as the
engine's worker does), with the environment the parent chose (GGML_VK_VISIBLE_DEVICES=0
puts Mesa's lavapipe in front of llama.cpp).
"""

from __future__ import annotations

import ctypes
import json
import re
import sys
from pathlib import Path

import numpy as np

BUFFER_LINE = re.compile(r"(\S+) (model|KV|compute) buffer size = +([\d.]+) MiB")
CONTEXT = 1024
# Tokens per pass. Up to 16 columns ggml-vulkan multiplies with its matrix-vector shaders;
# past that with its tiled matrix-matrix shaders, which lavapipe runs 30x slower (one layer
# on lavapipe: 16 tokens in 2.8 s, 32 in 49 s, 64 in 85 s; AMD EPYC, 2 cores). Every count,
# the CPU's included, runs the same passes: llama.cpp's CPU logits move with the pass size
# (up to 0.32 between 16 and 1024 tokens a pass on this text, the top tokens unchanged).
UBATCH = 16
# A raw prompt of 7 tokens, for answers computed on lavapipe: it stays within UBATCH, where a
# chat template's prompt would take the tiled shaders.
LAVAPIPE_PROMPT = "def add_two_numbers(a, b):\n"


def device_buffers(model: str, gpu_layers: int) -> dict[str, dict[str, float]]:
    """MiB by device and kind ("Vulkan0": {"model": .., "KV": .., "compute": ..}) that
    llama.cpp logs while it loads `model` as Ember's backend does."""
    import llama_cpp
    from llama_cpp._internals import LlamaContext, LlamaModel

    from backends.base import LoadPlan
    from backends.llamacpp.backend import ALL_LAYERS, context_params

    lines: list[str] = []

    @llama_cpp.llama_log_callback
    def keep(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        lines.append(text.decode(errors="replace"))

    llama_cpp.llama_log_set(keep, ctypes.c_void_p(0))
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = ALL_LAYERS if gpu_layers < 0 else gpu_layers
    llama_model = LlamaModel(path_model=model, params=params, verbose=False)
    ctx = LlamaContext(model=llama_model,
                       params=context_params(LoadPlan(CONTEXT, 2, gpu_layers)),
                       verbose=False)
    ctx.close()
    llama_model.close()
    from llama_cpp._logger import llama_log_callback

    llama_cpp.llama_log_set(llama_log_callback, ctypes.c_void_p(0))
    out: dict[str, dict[str, float]] = {}
    for m in BUFFER_LINE.finditer("".join(lines)):
        device = out.setdefault(m.group(1), {})
        device[m.group(2)] = device.get(m.group(2), 0.0) + float(m.group(3))
    return out


def scores(model: str, text: str, gpu_layers: int) -> np.ndarray:
    """Each position's logits over the text (its first 512 tokens), UBATCH at a time."""
    import llama_cpp

    # 0 layers: the CPU alone, as Ember loads it (no op offload: llama.cpp would send the
    # batch's matmuls to lavapipe, minutes of this test)
    llm = llama_cpp.Llama(model, n_gpu_layers=999 if gpu_layers < 0 else gpu_layers,
                          n_ctx=1024, n_batch=1024, n_ubatch=UBATCH, logits_all=True,
                          verbose=False, op_offload=gpu_layers != 0)
    ids = llm.tokenize(text.encode(), add_bos=False)[:512]
    llm.eval(ids)
    out = np.array(llm.scores[:len(ids)])
    llm.close()
    return out


def main(argv: list[str]) -> None:
    import backends.llamacpp  # noqa: F401  (the CPU backend, as everywhere)
    from backends.llamacpp import ggml_backends

    model, text_file, *counts = argv
    loaded = ggml_backends.load_backends(gpu=True)
    text = Path(text_file).read_text(encoding="utf-8")
    out: dict = {"devices": [d.name for d in loaded.devices], "failed": list(loaded.failed),
                 "top": {}, "gaps": {}, "buffers": {}}
    cpu: np.ndarray | None = None
    for arg in counts:
        count = arg.removeprefix("load:")
        out["buffers"][count] = device_buffers(model, int(count))
        if arg.startswith("load:"):
            continue
        logits = scores(model, text, int(count))
        top = np.argmax(logits, axis=1)
        out["top"][count] = [int(t) for t in top]
        if count == "0":
            cpu = logits
        elif cpu is not None:  # how far below the CPU's top each of this run's top tokens is
            out["gaps"][count] = [float(cpu[i].max() - cpu[i][t]) for i, t in enumerate(top)]
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
