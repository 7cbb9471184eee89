"""The cuda backend's engine on real models (CPU, float32): logits against llama.cpp on the
same GGUF, and greedy generations that must not depend on batching, caching or preemption."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import llama_cpp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from backends.base import LoadPlan
from backends.cuda import CudaBackend
from backends.cuda.engine import GREEDY, Engine, EngineConfig
from backends.cuda.sequence import Sequence
from backends.errors import InvalidRequestError
from backends.llamacpp import LlamaCppBackend
from tests.support import REPO

pytestmark = pytest.mark.slow
N_TOKENS = 1000
GGML_TYPE_F32 = 0
# Real English text that every CPython installation ships.
TEXT_FILE = Path(os.__file__).parent / "LICENSE.txt"


def load_cuda(model) -> CudaBackend:
    backend = CudaBackend(max_seqs=8)
    backend.load(model, LoadPlan(context=2048, threads=2, parallel=8, batch=256))
    return backend


@pytest.fixture(scope="module")
def qwen_cuda(qwen) -> CudaBackend:
    backend = load_cuda(qwen)
    yield backend
    backend.unload()


@pytest.fixture(scope="module")
def gemma_cuda(gemma) -> CudaBackend:
    backend = load_cuda(gemma)
    yield backend
    backend.unload()


def llama_cpp_logits(path: Path, tokens: list[int]) -> torch.Tensor:
    """llama.cpp's logits after every prefix (float32 KV cache, so only its matmuls differ)."""
    llm = llama_cpp.Llama(str(path), n_ctx=N_TOKENS + 16, n_batch=512, logits_all=True,
                          n_threads=2, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32,
                          flash_attn=False, verbose=False)
    try:
        llm.eval(tokens)
        return torch.from_numpy(np.array(llm.scores[:len(tokens)], dtype=np.float32))
    finally:
        llm.close()


def float32_copy(path: Path, out: Path) -> Path:
    """The same model with every tensor in F32, written by llama.cpp's own quantizer: on it
    llama.cpp computes in float32 too (on quantized weights it rounds activations to 8 bits)."""
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_ALL_F32
    params.allow_requantize = True
    params.nthread = 2
    assert llama_cpp.llama_model_quantize(str(path).encode(), str(out).encode(),
                                          ctypes.byref(params)) == 0
    return out


def agreement(ours: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """Top-1 agreement and mean KL(llama.cpp || ours) in nats."""
    top1 = (ours.argmax(-1) == ref.argmax(-1)).float().mean().item()
    kl = torch.nn.functional.kl_div(ours.log_softmax(-1), ref.log_softmax(-1),
                                    log_target=True, reduction="none").sum(-1).mean().item()
    return top1, kl


@pytest.fixture(scope="module")
def scored() -> dict[str, tuple[list[int], torch.Tensor, torch.Tensor]]:
    """Per model name, the text's first N_TOKENS tokens and their logits from our engine and
    from llama.cpp on the Q4_K_M file, computed once for the tests that compare them (a
    minute each on 2 cores)."""
    return {}


def scores_of(name: str, request: pytest.FixtureRequest,
              cache: dict[str, tuple[list[int], torch.Tensor, torch.Tensor]]
              ) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    if name not in cache:
        model = request.getfixturevalue(name)
        backend = request.getfixturevalue(f"{name}_cuda")
        tokens = backend.tokenizer.encode(TEXT_FILE.read_text())[:N_TOKENS]
        cache[name] = (tokens, backend.engine.score(tokens), llama_cpp_logits(model.path, tokens))
    return cache[name]


@pytest.mark.parametrize("name", ["qwen", "gemma"])
def test_teacher_forced_logits_match_llama_cpp_on_1000_tokens(name, request, scored):
    tokens, ours, ref = scores_of(name, request, scored)
    assert len(tokens) == N_TOKENS

    top1, kl = agreement(ours, ref)
    print(f"\n{name}: top-1 agreement with llama.cpp on the Q4_K_M file {top1:.2%} "
          f"(mean KL {kl:.2e})")
    # llama.cpp rounds activations to 8 bits before each matmul with quantized weights, and
    # flips near-ties. Measured here: Qwen 98.4%; Gemma 3 270M (a base model with flat
    # distributions: 5.7% of its positions have a top-2 margin under 0.1 nats) 96.5%, which is
    # exactly how often llama.cpp agrees with itself between this file and its float32 copy
    # (next test): the 98% is out of reach of any exact implementation for Gemma
    # (test_gemma_first_position_equals_llama_cpp_once_its_roundings_are_modelled: why).
    assert top1 >= (0.98 if name == "qwen" else 0.96)
    assert kl < 0.01


def test_gemma_logits_equal_llama_cpp_on_a_float32_copy(gemma, request, scored, tmp_path):
    """On F32 weights llama.cpp computes in float32 as we do: the same distributions over
    1,000 tokens checks every part of Gemma 3 (its norms, both rotary bases, the 512-token
    sliding window, the query scale) and the dequantization. The bound is tight enough to
    catch a window one token too wide or too narrow (measured KL 1.1e-5 and 1.7e-5, against
    3.6e-7 for the right one). (Qwen measured 100%, KL 2e-9, too; left out to keep the
    suite short.)

    llama.cpp's own run of the Q4_K_M file agrees with its float32 copy no better than ours
    does: what separates us from it on the quantized file is its arithmetic (8-bit rounding
    of activations before quantized weights; next test), not a difference in the model."""
    tokens, ours, ref_q4 = scores_of("gemma", request, scored)
    f32 = float32_copy(gemma.path, tmp_path / "f32.gguf")
    try:
        ref_f32 = llama_cpp_logits(f32, tokens)
    finally:
        f32.unlink()
    top1, kl = agreement(ours, ref_f32)
    ceiling, ceiling_kl = agreement(ref_f32, ref_q4)
    ours_q4, ours_q4_kl = agreement(ours, ref_q4)
    print(f"\ngemma: on its float32 copy {top1:.2%} (mean KL {kl:.2e}); on the Q4_K_M file "
          f"ours {ours_q4:.2%} (KL {ours_q4_kl:.2e}), llama.cpp's float32 run {ceiling:.2%} "
          f"(KL {ceiling_kl:.2e})")
    assert top1 >= 0.999 and kl < 2e-6
    assert ours_q4 >= ceiling - 0.005 and ours_q4_kl < 1.2 * ceiling_kl


# llama.cpp's CPU roundings, modelled (test-only): before a matmul with quantized weights it
# rounds the activations to 8 bits per block (ggml-cpu's vec_dot_type), and GELU goes through
# a float16 table (GGML_GELU_FP16)
Q8_K_BEFORE = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}
Q8_0_BEFORE = {"Q4_0", "Q5_0", "Q8_0"}


def q8_k_rounded(x: torch.Tensor) -> torch.Tensor:
    """quantize_row_q8_K_ref then back: blocks of 256, scale from the signed absmax."""
    blocks = x.reshape(-1, 256)
    top = blocks.gather(-1, blocks.abs().argmax(-1, keepdim=True))
    iscale = torch.where(top != 0, -127.0 / top, torch.zeros_like(top))
    d = torch.where(top != 0, 1.0 / iscale, torch.zeros_like(top))
    return (torch.round(iscale * blocks).clamp(max=127) * d).reshape(x.shape)


def q8_0_rounded(x: torch.Tensor) -> torch.Tensor:
    """quantize_row_q8_0 (x86) then back: blocks of 32, a float16 scale."""
    blocks = x.reshape(-1, 32)
    amax = blocks.abs().amax(-1, keepdim=True)
    inverse = torch.where(amax != 0, 127.0 / amax, torch.zeros_like(amax))
    return (torch.round(blocks * inverse) * (amax / 127.0).half().float()).reshape(x.shape)


def gelu_fp16_table(x: torch.Tensor) -> torch.Tensor:
    y = F.gelu(x.half().float(), approximate="tanh").half().float()
    return torch.where(x <= -10, torch.zeros_like(x), torch.where(x >= 10, x, y))


def score_with_llama_cpp_roundings(backend: CudaBackend, path: Path,
                                   tokens: list[int]) -> torch.Tensor:
    from gguf import GGUFReader

    from backends.cuda.fuse import FUSED
    from backends.cuda.loader import gguf_name
    from backends.cuda.models.layers import GatedMLP

    types = {gguf_name(t.name): t.tensor_type.name for t in GGUFReader(path).tensors}
    rounding = {**dict.fromkeys(Q8_K_BEFORE, q8_k_rounded),
                **dict.fromkeys(Q8_0_BEFORE, q8_0_rounded)}
    for name in list(types):  # a fused projection: its parts' rounding, if they share one
        for fused, parts in FUSED.items():
            prefix, dot, _ = name.partition(f".{parts[0]}.weight")
            if dot:
                kinds = {rounding.get(types[f"{prefix}.{p}.weight"]) for p in parts}
                assert len(kinds) == 1, f"{prefix}.{fused}: parts rounded differently"
                types[f"{prefix}.{fused}.weight"] = types[name]
    model = backend.engine.runner.model
    hooks, acts = [], []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and types[f"{name}.weight"] in rounding:
            f = rounding[types[f"{name}.weight"]]
            hooks.append(module.register_forward_pre_hook(lambda m, a, f=f: (f(a[0]),)))
        elif isinstance(module, GatedMLP):
            acts.append((module, module.act))
            module.act = gelu_fp16_table
    head = rounding.get(types.get("output.weight", types["tok_embd.weight"]))
    model.logits = lambda h: type(model).logits(model, head(h) if head else h)
    try:
        return backend.engine.score(tokens)
    finally:
        del model.logits
        for hook in hooks:
            hook.remove()
        for module, act in acts:
            module.act = act


def test_gemma_first_position_equals_llama_cpp_once_its_roundings_are_modelled(
        gemma, gemma_cuda):
    """Where we part from llama.cpp on the Q4_K_M file is its arithmetic, not the model: with
    its roundings modelled (8-bit activations before quantized weights, GELU through a
    float16 table) the first position, which has no attention sum, gets llama.cpp's logits
    to 1e-3 (measured 1.2e-5; 0.48 unmodelled): dequantization, norms, rotary, MLP and head
    are right on the quantized file itself. Later positions stay apart (measured: 96.8%
    top-1 over 1,000 tokens, modelled or not): their attention sums differ from llama.cpp's
    in the last bits, and the 8-bit rounding of the next matmul's input turns that into
    whole steps. That is why no implementation that does not copy llama.cpp's summation
    order bit for bit reaches the issue's 98% on Gemma 3 270M."""
    tokens = gemma_cuda.tokenizer.encode(TEXT_FILE.read_text())[:32]
    ref = llama_cpp_logits(gemma.path, tokens)
    plain = gemma_cuda.engine.score(tokens)
    modelled = score_with_llama_cpp_roundings(gemma_cuda, gemma.path, tokens)
    first, first_plain = ((x[0] - ref[0]).abs().max().item() for x in (modelled, plain))
    later = (modelled[1:] - ref[1:]).abs().amax(-1).median().item()
    print(f"\ngemma position 0: max |logit difference| {first:.1e} modelled, "
          f"{first_plain:.2f} unmodelled; later positions (median) {later:.2f}")
    assert first < 1e-3 < 0.05 < first_plain


def test_tokens_equal_llama_cpp_for_tricky_strings(qwen, qwen_cuda):
    tricky = ["héllo wörld", "日本語のテキスト", "emoji 🤖🔥 and ZWJ 👩\u200d💻",
              "  two  spaces\t\ttabs\n\n",
              "def f(x):\n    return x**2  # sq\n", "<|im_start|>user\nhi<|im_end|>",
              "1234567890 3.14159 -0.5e-3", "\u00a0nbsp and \r\n crlf", "", "a" * 300]
    reference = LlamaCppBackend()
    reference.load(qwen, LoadPlan(context=512, threads=2))
    try:
        for text in tricky:
            assert qwen_cuda.tokenize(text) == reference.tokenize(text), text
            tokens = reference.tokenize(text)
            assert qwen_cuda.detokenize(tokens) == reference.detokenize(tokens) == text
        with pytest.raises(InvalidRequestError, match="token 0 is -1"):
            qwen_cuda.detokenize([-1])
    finally:
        reference.unload()


PROMPTS = ["def fibonacci(n):", "The capital of France is", "import numpy as np\n" * 6,
           "# sort a list of dicts by key\n", "SELECT name FROM users WHERE", "x = [",
           "Rust and Go are both", "class Stack:\n    def __init__(self):\n"]


def test_greedy_alone_equals_greedy_inside_a_batch_of_8(qwen_cuda):
    tok, engine = qwen_cuda.tokenizer, qwen_cuda.engine
    prompts = [tok.encode(p) for p in PROMPTS]
    assert len({len(p) for p in prompts}) > 4  # mixed lengths
    batched = engine.generate(prompts, 10)
    alone = engine.generate([prompts[2]], 10)[0]
    assert batched[2] == alone
    assert len({tuple(b) for b in batched}) == len(batched)


def test_greedy_with_a_prefix_cache_hit_equals_without(qwen_cuda):
    tok, engine = qwen_cuda.tokenizer, qwen_cuda.engine
    system = "You are a careful assistant that answers in one short sentence. " * 3
    prompt = tok.encode(system + "Question: what is a linked list?\nAnswer:")

    def run() -> tuple[list[int], int]:
        seq = Sequence(prompt, GREEDY, 10)
        engine.add(seq)
        while seq.num_output < 10:
            engine.step()
        engine.finish(seq)
        return seq.output, seq.num_cached

    cold, cold_cached = run()
    warm, warm_cached = run()
    assert cold_cached == 0 and warm_cached == (len(prompt) - 1) // 16 * 16 > 0
    assert warm == cold


def test_greedy_after_a_preemption_equals_uninterrupted(gemma_cuda):
    tok = gemma_cuda.tokenizer
    model = gemma_cuda.engine.runner.model
    # 3 blocks of 16 tokens: two sequences that each grow past 16 tokens (2 blocks) cannot
    # both stay, so the younger one is preempted and recomputed
    small = Engine(model, EngineConfig(context=32, max_seqs=2, max_tokens=64, num_blocks=3),
                   torch.device("cpu"), torch.float32)
    prompts = [tok.encode("Monday, Tuesday, Wednesday,"), tok.encode("One, two, three,")]
    together = small.generate(prompts, 14)
    assert small.scheduler.preemptions > 0
    alone = [small.generate([p], 14)[0] for p in prompts]
    assert together == alone


def test_ember_run_with_the_cuda_backend_answers_on_the_cpu_and_says_so(gemma):
    r = subprocess.run([sys.executable, "-m", "app.cli", "run", gemma.id,
                        "Monday, Tuesday, Wednesday,", "--backend", "cuda", "--temperature", "0",
                        "--max-tokens", "4", "--json"], capture_output=True, text=True,
                       timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["backend"] == "cuda" and out["text"].startswith(" Thursday")
    assert "no NVIDIA GPU found; the cuda backend runs on the CPU" in r.stderr
