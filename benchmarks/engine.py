"""The cuda backend's engine: decode tokens/s at batch 1, 8, 32, 64, prefill tokens/s, and
for batch 1 the memory bandwidth it achieves against the machine's limit (as gpt-fast
prints). On a CPU it also runs the llama.cpp backend on the same model in the same run.
Prints JSON.

    .venv/bin/python benchmarks/engine.py [--model qwen2.5-coder-0.5b-instruct]
    .venv/bin/python benchmarks/engine.py --random llama3-8b   # random weights (GPU)
    .venv/bin/python benchmarks/engine.py --random llama3-8b --quant int4 --batches 1,8
    .venv/bin/python benchmarks/engine.py --random llama3-8b --graphs compare  # GPU
    .venv/bin/python benchmarks/engine.py --random llama3-8b --quant fp8 --compile compare

Decode: B sequences with 32-token prompts; once every prompt is in the cache, `--steps`
decode steps are timed (B tokens each). Prefill: one 512-token prompt to its first token.
`--graphs compare` also decodes every batch without CUDA graphs: the speedup they give, and
whether both ways make the same tokens. `--compile compare` does the same for decode steps
through torch.compile (EngineConfig.compile, on top of the graphs where they are on).
q/k/v and gate/up are always fused (backends/cuda/fuse.py).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from app.hardware import detect
from app.store import Store
from backends.base import GenerationRequest, LoadPlan, SamplingParams
from backends.cuda.backend import pick_device
from backends.cuda.engine import GREEDY, Engine, EngineConfig
from backends.cuda.loader import pack_linears
from backends.cuda.model_config import ModelConfig
from backends.cuda.models import build_model
from backends.cuda.models.layers import CausalLM
from backends.cuda.sequence import Sequence

PROMPT_LEN, PREFILL_LEN = 32, 512
SHAPES = {  # random-weight models of real shapes, for a GPU where nothing can be downloaded
    "llama3-8b": ModelConfig("llama", 128256, 4096, 32, 32, 8, 128, 14336, 1e-5, 500000.0,
                             8192),
    "llama3.2-1b": ModelConfig("llama", 128256, 2048, 16, 32, 8, 64, 8192, 1e-5, 500000.0,
                               8192),  # Llama 3's vocabulary: a draft for the 8B
    "qwen2.5-0.5b": ModelConfig("qwen2", 151936, 896, 24, 14, 2, 64, 4864, 1e-6, 1e6, 32768,
                                qkv_bias=True),
    # Llama 3's layout on two small layers and a 2,048-token vocabulary: the GPU checks'
    # rehearsal on a CPU, where Triton's interpreter would take minutes over a real head
    "tiny-llama": ModelConfig("llama", 2048, 128, 2, 4, 2, 32, 256, 1e-5, 500000.0, 8192),
}


def random_model(cfg: ModelConfig, device: torch.device, dtype: torch.dtype) -> CausalLM:
    model = build_model(cfg).to_empty(device=device).to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
    model.load_weights(dict(model.state_dict()))  # rotary tables on the right device
    return model.eval()


def quantized(model: CausalLM, quant: str) -> CausalLM:
    """The same model with every Linear packed as `quant` (kernels.quant)."""
    packed = build_model(model.config)
    packed.load_weights(pack_linears(dict(model.state_dict()), quant))
    return packed.eval()


def weight_bytes(model: CausalLM) -> int:
    """Bytes one decode step reads: every matrix once (the embedding only as the tied head),
    packed int8/int4 weights with their scales."""
    tensors = [*model.named_parameters(), *model.named_buffers()]
    total = sum(p.numel() * p.element_size() for n, p in tensors
                if not n.startswith("tok_embd") and not n.endswith("inv_freq"))
    if model.output is None:
        total += model.tok_embd.weight.numel() * model.tok_embd.weight.element_size()
    return total


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def decode_rate(model: CausalLM, device, dtype, batch: int, steps: int, vocab: int,
                graphs: bool = True, compile: bool = False
                ) -> tuple[float, list[list[int]], float | None]:
    """Aggregate decode tokens/s, every sequence's greedy output, and on a GPU with graphs
    the milliseconds of the decode graph's replay alone."""
    engine = Engine(model, EngineConfig(context=PROMPT_LEN + steps + 16, max_seqs=batch,
                                        max_tokens=max(512, batch), cuda_graphs=graphs,
                                        compile=compile),
                    device, dtype)
    gen = torch.Generator().manual_seed(0)
    seqs = [Sequence(torch.randint(100, vocab - 100, (PROMPT_LEN,), generator=gen).tolist(),
                     GREEDY, steps + 2) for _ in range(batch)]
    for s in seqs:
        engine.add(s)
    while any(s.num_output == 0 for s in seqs):
        engine.step()
    engine.step()  # one untimed decode step (warm-up, graph replay paths)
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    sync(device)
    rate = batch * steps / (time.perf_counter() - start)
    return rate, [s.output for s in seqs], graph_replay_ms(engine, batch)


def graph_replay_ms(engine: Engine, batch: int, n: int = 20) -> float | None:
    """GPU milliseconds of one replay of the decode graph this batch uses (CUDA events):
    the model's share of a decode step, without the engine's Python around it."""
    graphs = engine.runner.graphs
    size = next((b for b in sorted(graphs) if b >= batch), None)
    if size is None:
        return None
    graph = graphs[size][0]
    graph.replay()  # its inputs are the last step's: it rewrites that step's KV slots
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def prefill_rate(model: CausalLM, device, dtype, vocab: int) -> float:
    engine = Engine(model, EngineConfig(context=PREFILL_LEN + 16, max_seqs=1,
                                        max_tokens=PREFILL_LEN), device, dtype)
    tokens = torch.randint(100, vocab - 100, (PREFILL_LEN,)).tolist()
    engine.score(tokens[:64])  # warm-up
    sync(device)
    start = time.perf_counter()
    seq = Sequence(tokens, GREEDY, 1)
    engine.add(seq)
    while seq.num_output == 0:
        engine.step()
    sync(device)
    return PREFILL_LEN / (time.perf_counter() - start)


def llama_cpp_rates(path: Path, batches: list[int], steps: int, threads: int) -> dict:
    """The llama.cpp backend on the same file: decode at each batch size, and prefill."""
    from backends.llamacpp import LlamaCppBackend

    out = {}
    text = "def fibonacci(n):\n" * 8
    for batch in batches:
        backend = LlamaCppBackend()
        backend.load(_installed(path), LoadPlan(context=256, threads=threads, parallel=batch,
                                                batch=512))
        # room for the tokens the first streams make while the last prompts are evaluated
        req = GenerationRequest(prompt=text, sampling=SamplingParams(
            temperature=0.0, max_tokens=steps + 2 * batch + 8))
        for i in range(batch):
            backend.submit(f"s{i}", req)
        engine = backend.engine
        while engine.waiting or any(s.job is not None and s.job.n_out == 0
                                    for s in engine.slots):
            backend.step()
        jobs = [s.job for s in engine.slots if s.job is not None]  # kept after they finish
        before = sum(j.n_out for j in jobs)
        start = time.perf_counter()
        for _ in range(steps):
            backend.step()
        produced = sum(j.n_out for j in jobs) - before
        out[f"decode_tok_s_batch_{batch}"] = round(produced / (time.perf_counter() - start), 2)
        if batch == batches[0]:
            long = GenerationRequest(prompt="word " * (PREFILL_LEN - 1),
                                     sampling=SamplingParams(temperature=0.0, max_tokens=1))
            while backend.has_work():
                backend.step()
            done = [e for e in backend.generate(long) if hasattr(e, "stats")][0]
            out["prefill_tok_s"] = round(done.stats.prompt_tokens / done.stats.ttft_s, 1)
        backend.unload()
    return out


def _installed(path: Path):
    from app.store import InstalledModel
    return InstalledModel(id=path.stem, quant="", format="gguf", path=path,
                          size_bytes=path.stat().st_size, sha256="", architecture="",
                          context_length=0, chat=False, origin="import", installed_at=0.0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--random", choices=sorted(SHAPES), default=None)
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--steps", type=int, default=None, help="timed decode steps per batch")
    ap.add_argument("--no-llama-cpp", action="store_true")
    ap.add_argument("--quant", choices=["int8", "int4", "fp8"], default=None,
                    help="pack every Linear weight (the Triton kernels, or cuBLASLt's FP8 "
                         "GEMM, on a GPU)")
    ap.add_argument("--compile", choices=["on", "off", "compare"], default="off",
                    help="decode steps through torch.compile: on, off, or both ways")
    ap.add_argument("--graphs", choices=["on", "off", "compare"], default="on",
                    help="CUDA graphs for decode steps (GPU): on, off, or both ways")
    args = ap.parse_args()
    device, dtype = pick_device()
    hw = detect()
    threads = max(1, hw.physical_cores)
    torch.set_num_threads(threads)
    batches = [int(b) for b in args.batches.split(",")]
    steps = args.steps or (32 if device.type == "cuda" else 4)

    path = None
    if args.random:
        cfg = SHAPES[args.random]
        model = random_model(cfg, device, dtype)
        if args.quant:
            model = quantized(model, args.quant)
            if device.type == "cuda":
                torch.cuda.empty_cache()
        name = f"random {args.random}"
    else:
        from backends.cuda.loader import load_weights
        path = Store().get(args.model).path
        weights = load_weights(path, dtype, device, args.quant)
        cfg = weights.config
        model = build_model(cfg)
        model.load_weights(weights.tensors)
        model.eval()
        name = args.model

    if device.type == "cuda":
        gpu = next((g for g in hw.gpus if g.vendor == "nvidia"), None)
        limit = (gpu.bandwidth_gbps if gpu else None) or 0.0
        where = gpu.name if gpu else torch.cuda.get_device_name()
    else:
        limit, where = hw.cpu_bandwidth_gbps, f"{hw.cpu} ({threads} threads)"
    result: dict = {"model": name, "device": where, "dtype": str(dtype).removeprefix("torch."),
                    "cuda_graphs": args.graphs if device.type == "cuda" else "none on a CPU",
                    "compile": args.compile,
                    "weights": args.quant or str(dtype).removeprefix("torch."),
                    "bandwidth_limit_gbps": limit, "bandwidth_source": hw.bandwidth_source,
                    "weight_bytes_per_token": weight_bytes(model), "ember_cuda": {}}
    ours = result["ember_cuda"]
    for b in batches:
        rate, tokens, replay_ms = decode_rate(model, device, dtype, b, steps, cfg.vocab_size,
                                              graphs=args.graphs != "off",
                                              compile=args.compile == "on")
        ours[f"decode_tok_s_batch_{b}"] = round(rate, 2)
        if replay_ms is not None:
            ours[f"step_ms_batch_{b}"] = round(1e3 * b / rate, 3)
            ours[f"graph_replay_ms_batch_{b}"] = round(replay_ms, 3)
        if args.graphs == "compare":
            eager, eager_tokens, _ = decode_rate(model, device, dtype, b, steps,
                                                 cfg.vocab_size, graphs=False)
            ours[f"decode_tok_s_batch_{b}_no_graphs"] = round(eager, 2)
            ours[f"graphs_speedup_batch_{b}"] = round(rate / eager, 2)
            ours[f"graphs_same_tokens_batch_{b}"] = tokens == eager_tokens
        if args.compile == "compare":
            compiled, compiled_tokens, compiled_ms = decode_rate(
                model, device, dtype, b, steps, cfg.vocab_size, graphs=args.graphs != "off",
                compile=True)
            ours[f"decode_tok_s_batch_{b}_compiled"] = round(compiled, 2)
            ours[f"compile_speedup_batch_{b}"] = round(compiled / rate, 2)
            ours[f"compile_same_tokens_batch_{b}"] = tokens == compiled_tokens
            if compiled_ms is not None:
                ours[f"graph_replay_ms_batch_{b}_compiled"] = round(compiled_ms, 3)
    ours["prefill_tok_s"] = round(prefill_rate(model, device, dtype, cfg.vocab_size), 1)
    if 1 in batches:
        gbps = ours["decode_tok_s_batch_1"] * result["weight_bytes_per_token"] / 1e9
        ours["batch_1_gbps"] = round(gbps, 2)
        ours["batch_1_pct_of_bandwidth"] = round(100 * gbps / limit, 1) if limit else None
    if path is not None and device.type == "cpu" and not args.no_llama_cpp:
        ref = llama_cpp_rates(path, batches, steps, threads)
        if "decode_tok_s_batch_1" in ref:
            gbps = ref["decode_tok_s_batch_1"] * path.stat().st_size / 1e9
            ref["batch_1_gbps"] = round(gbps, 2)
            ref["batch_1_pct_of_bandwidth"] = round(100 * gbps / limit, 1) if limit else None
        result["llama_cpp"] = ref
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
