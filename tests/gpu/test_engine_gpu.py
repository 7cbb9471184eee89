"""The cuda engine on an NVIDIA GPU against its own float32 run on the CPU (the path CI
tests on every change): the same greedy tokens through the Triton kernels and the CUDA
graphs, logits that agree, graphs that change nothing, speculative decoding that stays
exactly the plain greedy answer, sliding windows, and int8/int4 weights.

Collected only on a machine with an NVIDIA GPU (tests/conftest.py); run it with
`bash benchmarks/gpu_checks.sh`."""

from __future__ import annotations

import copy

import pytest
import torch

from backends.cuda.engine import GREEDY, Engine, EngineConfig
from backends.cuda.loader import pack_linears
from backends.cuda.model_config import ModelConfig
from backends.cuda.models import build_model
from backends.cuda.models.layers import CausalLM, Rotary
from backends.cuda.sequence import Sequence
from tests.support.kernel_cases import close
from tests.unit.test_cuda_speculative import DRAFT, LOOKUP, TINY_GEMMA, tiny_model
from tests.unit.test_cuda_speculative import PROMPTS as SPEC_PROMPTS

if not torch.cuda.is_available():
    raise RuntimeError("tests/gpu needs a CUDA device")

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
# Small, but with Llama-3-8B's head size and grouping (128-wide heads, 4 query heads per kv
# head), and room for contexts of several 256-token partitions of the decode kernel.
SMALL = ModelConfig("llama", vocab_size=512, hidden_size=256, num_layers=2, num_heads=8,
                    num_kv_heads=2, head_dim=128, intermediate_size=512, rms_norm_eps=1e-5,
                    rope_theta=500000.0, max_position=4096)
PROMPTS = [list(range(3, 40)), [7, 8], list(range(100, 117)) * 3]  # 3 rows: a padded graph
LONG = [list(range(5, 505)) * 2]  # 1000 tokens: four partitions of the decode kernel


def model_on(model: CausalLM, device: torch.device, dtype: torch.dtype) -> CausalLM:
    """A copy of `model` on `device`, its floating-point weights in `dtype` (packed int8/int4
    weights stay integers), the rotary frequencies in float32 as the loader makes them."""
    moved = copy.deepcopy(model).to(device, dtype)
    for module in moved.modules():
        if isinstance(module, Rotary):
            module.inv_freq = module.frequencies(device)
    return moved.eval()


def engine(model: CausalLM, device: torch.device, dtype: torch.dtype, **config) -> Engine:
    base = dict(context=1024, max_seqs=4, max_tokens=256, adaptive_speculation=False)
    return Engine(model_on(model, device, dtype), EngineConfig(**(base | config)), device,
                  dtype)


@pytest.fixture(scope="module")
def small() -> CausalLM:
    return tiny_model(3, config=SMALL)


def test_float32_on_the_gpu_decodes_the_cpus_tokens_and_scores_its_logits(small):
    cpu = engine(small, CPU, torch.float32)
    gpu = engine(small, CUDA, torch.float32)
    assert gpu.runner.graphs  # decode steps replay CUDA graphs
    assert gpu.generate(PROMPTS, 40) == cpu.generate(PROMPTS, 40)
    assert gpu.generate(LONG, 24) == cpu.generate(LONG, 24)
    close(gpu.score(LONG[0][:600]).cpu(), cpu.score(LONG[0][:600]), 1e-3)


def test_cuda_graphs_change_no_token(small):
    for dtype in (torch.float32, torch.bfloat16):
        graphs = engine(small, CUDA, dtype).generate(PROMPTS + LONG, 32)
        eager = engine(small, CUDA, dtype, cuda_graphs=False).generate(PROMPTS + LONG, 32)
        assert graphs == eager, dtype


def unit_gain_model(seed: int) -> CausalLM:
    """Random weights that keep activations at their scale through the layers (std
    1/sqrt(fan-in)), as trained models do: bf16's rounding is not amplified layer by layer
    as in the large-weight tiny models. Its float32 run against bf16 on the CPU: argmax
    agreement 0.987-0.989 over 700 rows, largest logit error 0.7% of the largest logit."""
    g = torch.Generator().manual_seed(seed)
    model = build_model(SMALL).to_empty(device="cpu").float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.startswith("tok_embd"):
                p.copy_(torch.randn(p.shape, generator=g))
            else:  # the head a little larger: distributions about as peaked as a model's
                std = 0.3 if name.startswith("output") else p.shape[-1] ** -0.5
                p.copy_(torch.randn(p.shape, generator=g) * std)
    model.load_weights(dict(model.state_dict()))
    return model.eval()


def test_bfloat16_agrees_with_the_cpus_float32_teacher_forced():
    """bf16 rounds differently, so tokens may differ where two are close: compare the
    teacher-forced rows instead (argmax agreement and the logits' error)."""
    model = unit_gain_model(4)
    tokens = LONG[0][:700]
    cpu = engine(model, CPU, torch.float32).score(tokens)
    gpu = engine(model, CUDA, torch.bfloat16).score(tokens).cpu()
    agree = (gpu.argmax(-1) == cpu.argmax(-1)).float().mean().item()
    assert agree >= 0.95, agree
    close(gpu, cpu, 2e-2)


@pytest.mark.parametrize("quant", ["int8", "int4"])
def test_packed_weights_on_the_gpu_decode_the_cpu_references_tokens(small, quant):
    """The Triton kernels (GPU) against the plain-torch reference of the same packed
    weights (CPU), both in float32."""
    tensors = {n: t.float() for n, t in small.state_dict().items()}
    model = build_model(SMALL)
    model.load_weights(pack_linears(tensors, quant))
    model.eval()
    cpu = engine(model, CPU, torch.float32)
    gpu = engine(model, CUDA, torch.float32)
    assert type(gpu.runner.model.layers[0].mlp.gate_up).__name__ == "QuantLinear"
    assert gpu.generate(PROMPTS, 32) == cpu.generate(PROMPTS, 32)


def test_speculative_greedy_on_the_gpu_is_the_plain_greedy_answer():
    """The unit tier's tiny pair (tests/unit/test_cuda_speculative.py): a draft that mostly
    agrees, and prompt lookup on a prompt whose answer repeats itself; verifications replay
    the multi-row decode graphs, plain decodes the decode graphs."""
    target, draft = tiny_model(1), tiny_model(2, like=tiny_model(1), noise=0.08)
    plain = engine(target, CUDA, torch.float32, context=256).generate(SPEC_PROMPTS, 30)
    assert plain == engine(target, CPU, torch.float32, context=256).generate(SPEC_PROMPTS, 30)
    spec_engine = engine(target, CUDA, torch.float32, context=256)
    spec_engine.use_draft(model_on(draft, CUDA, torch.float32), "tiny-draft")
    specs = [DRAFT, DRAFT, None, LOOKUP]
    seqs = [Sequence(list(p), GREEDY, 30, speculative=s)
            for p, s in zip(SPEC_PROMPTS, specs, strict=True)]
    for seq in seqs:
        spec_engine.add(seq)
    while spec_engine.has_work():
        for seq, _ in spec_engine.step():
            if seq.num_output >= seq.max_new and seq.status.value != "finished":
                spec_engine.finish(seq)
    assert [s.output[:30] for s in seqs] == plain
    for seq in (seqs[0], seqs[1], seqs[3]):
        assert 0 < seq.num_accepted < seq.num_drafted  # some held, some were rolled back
    assert spec_engine.runner.paths["verify_graph"] > 0, spec_engine.runner.paths


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_verification_graph_replays_equal_eager_verification(dtype):
    """The same speculating batch with the verification graphs and without (eager
    multi-row decodes): identical tokens, and each ran the path it claims."""
    target, draft = tiny_model(1), tiny_model(2, like=tiny_model(1), noise=0.08)
    outputs, runners = [], []
    for graphs in (True, False):
        e = engine(target, CUDA, dtype, context=256, cuda_graphs=graphs)
        e.use_draft(model_on(draft, CUDA, dtype), "tiny-draft")
        seqs = e.generate_seqs(SPEC_PROMPTS[:2], 30, speculative=DRAFT)
        outputs.append([s.output for s in seqs])
        runners.append(e.runner)
    assert outputs[0] == outputs[1]
    assert runners[0].paths["verify_graph"] > 0 and runners[0].verify_graph_bytes >= 0
    assert runners[1].paths["verify"] > 0 and not runners[1].paths["verify_graph"]


def test_calibration_on_the_gpu_measures_every_verification_size(small):
    e = engine(small, CUDA, torch.bfloat16)
    assert sorted(e.speculator.times.rows) == list(range(1, 10))


def test_sliding_window_model_on_the_gpu_decodes_the_cpus_tokens():
    model = tiny_model(6, config=TINY_GEMMA)
    prompts = [list(range(1, 45)), [3, 4, 5]]
    cpu = engine(model, CPU, torch.float32, context=256, max_tokens=64)
    gpu = engine(model, CUDA, torch.float32, context=256, max_tokens=64)
    assert gpu.runner.window_cache is not None  # the window's own pool is in use
    assert gpu.generate(prompts, 60) == cpu.generate(prompts, 60)
