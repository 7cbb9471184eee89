"""Teacher-forced next-token agreement of a GGUF model with N layers offloaded, against the
CPU: one process loads the model once per layer count, evaluates the same text in one batch
with every position's logits, and prints each position's top token per count as JSON.

    python -m tests.support.offload_agreement MODEL.gguf TEXT_FILE 0 -1 12

Run as a child: the GPU backends are loaded here (backends.llamacpp.ggml_backends, as the
engine's worker does), with the environment the parent chose (GGML_VK_VISIBLE_DEVICES=0
puts Mesa's lavapipe in front of llama.cpp).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def top_tokens(model: str, text: str, gpu_layers: int) -> list[int]:
    import llama_cpp

    llm = llama_cpp.Llama(model, n_gpu_layers=999 if gpu_layers < 0 else gpu_layers,
                          n_ctx=1024, n_batch=1024, logits_all=True, verbose=False)
    ids = llm.tokenize(text.encode(), add_bos=False)[:512]
    llm.eval(ids)
    top = np.argmax(np.asarray(llm.scores[:len(ids)]), axis=1)
    llm.close()
    return [int(t) for t in top]


def main(argv: list[str]) -> None:
    import backends.llamacpp  # noqa: F401  (the CPU backend, as everywhere)
    from backends.llamacpp import ggml_backends

    model, text_file, *counts = argv
    loaded = ggml_backends.load_backends(gpu=True)
    text = Path(text_file).read_text(encoding="utf-8")
    out: dict = {"devices": [d.name for d in loaded.devices], "failed": list(loaded.failed),
                 "top": {}}
    for count in counts:
        out["top"][count] = top_tokens(model, text, int(count))
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
