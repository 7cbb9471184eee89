"""Ember's cuda engine against a peer on the same random-weight model shape, in one run:
Hugging Face transformers' Llama (torch's `scaled_dot_product_attention`), eagerly with its
dynamic cache, and under `torch.compile` with a static cache (the transformers recipe for
fast decoding). Batch-1 greedy decode tokens/s; our figure as a ratio of each. Prints JSON.

    python3 benchmarks/peer_decode.py --random llama3-8b   # on a GPU, bf16

A decode rate is (N2 - N1) / (t(N2) - t(N1)) for two `generate` calls of N1 and N2 new
tokens after the same prompt, so the prompt and the first call's compilation fall out;
the median of `--repeat` such pairs. Both models are random (normal 0.02), llama3-8b's shape.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.cuda.backend import pick_device
from backends.cuda.model_config import ModelConfig
from benchmarks.engine import SHAPES, decode_rate, random_model, sync

PROMPT = 32


def hf_model(cfg: ModelConfig, device: torch.device, dtype: torch.dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                         intermediate_size=cfg.intermediate_size,
                         num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
                         num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
                         rms_norm_eps=cfg.rms_norm_eps, rope_theta=cfg.rope_theta,
                         max_position_embeddings=cfg.max_position,
                         tie_word_embeddings=cfg.tie_embeddings, attn_implementation="sdpa")
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(old)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.eval()


def hf_rate(model, device: torch.device, n1: int, n2: int, repeat: int,
            static: bool) -> float:
    ids = torch.randint(100, model.config.vocab_size - 100, (1, PROMPT), device=device,
                        generator=torch.Generator(device=device).manual_seed(0))
    kwargs: dict = dict(do_sample=False, top_p=None, top_k=None, temperature=None)
    if static:
        kwargs["cache_implementation"] = "static"

    def timed(n: int) -> float:
        sync(device)
        start = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kwargs)
        sync(device)
        assert out.shape[1] == PROMPT + n
        return time.perf_counter() - start

    timed(n1)  # warm-up (compilation, for the static cache's compiled forward)
    timed(n2)
    rates = [(n2 - n1) / (timed(n2) - timed(n1)) for _ in range(repeat)]
    return statistics.median(rates)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--random", choices=sorted(SHAPES), default="llama3-8b")
    ap.add_argument("--tokens", default="16,144", help="N1,N2 new tokens per generate call")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile peer")
    args = ap.parse_args()
    n1, n2 = (int(n) for n in args.tokens.split(","))
    device, dtype = pick_device()
    cfg = SHAPES[args.random]
    result: dict = {"model": f"random {args.random}", "dtype": str(dtype).removeprefix("torch."),
                    "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                    "batch": 1, "torch": torch.__version__}
    ours = random_model(cfg, device, dtype)
    rate, _, _ = decode_rate(ours, device, dtype, 1, n2 - n1, cfg.vocab_size)
    result["ember_tok_s"] = round(rate, 2)
    del ours
    if device.type == "cuda":
        torch.cuda.empty_cache()
    import transformers

    result["transformers"] = transformers.__version__
    model = hf_model(cfg, device, dtype)
    eager = hf_rate(model, device, n1, n2, args.repeat, static=False)
    result["hf_eager_sdpa_tok_s"] = round(eager, 2)
    result["ember_over_hf_eager"] = round(rate / eager, 2)
    print(json.dumps(result, indent=2), flush=True)  # before the compile, which may fail
    if not args.no_compile:
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        start = time.perf_counter()
        try:
            compiled = hf_rate(model, device, n1, n2, args.repeat, static=True)
        except RuntimeError as e:  # transformers x torch versions where the recipe breaks
            result["hf_compiled_error"] = str(e).splitlines()[0][:200]
        else:
            result["hf_compiled_static_tok_s"] = round(compiled, 2)
            result["ember_over_hf_compiled"] = round(rate / compiled, 2)
        result["hf_compile_and_measure_s"] = round(time.perf_counter() - start, 1)
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
