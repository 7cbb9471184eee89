"""kernels/: the int8/int4 packing, every Triton kernel against its plain-torch reference
(run by Triton's interpreter on the CPU), and the engine and loader on packed weights of tiny
random models. (Conversions of a real GGUF's blocks: tests/integration/test_kernels_real_qwen.py.)

TRITON_INTERPRET=1 has to be set before a kernel is decorated, i.e. before
kernels.*_triton is imported. The `interpreter` fixture sets it for this module only and
drops the kernel modules on both sides, so no other test file (or a GPU run after this one in
the same process) gets interpreted kernels; the variable never reaches subprocesses started
by other modules. The interpreter computes float32 and float16 faithfully but not bfloat16
(its tl.dot on bf16 operands returns garbage, Triton 3.9), so the GPU's bf16 is not covered
here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from backends.base import SpeculativeParams
from backends.cuda.engine import Engine, EngineConfig
from backends.cuda.loader import LINEAR, load_weights, pack_linears
from backends.cuda.model_config import ModelConfig
from backends.cuda.models import build_model
from kernels.dispatch import choose_backend
from kernels.matmul import linear, linear_reference
from kernels.paged_attention import (
    paged_decode,
    paged_decode_reference,
    paged_verify,
    paged_verify_reference,
)
from kernels.quant import (
    Int4Weight,
    Int8Weight,
    pack_int4,
    quantize,
    quantize_int4,
    quantize_int8,
    unpack_int4,
)
from tests.support.kernel_cases import close, paged_case, triton_interpreter, verify_case, weights

TRITON_MODULES = ("kernels.matmul_triton", "kernels.gemv_triton",
                  "kernels.paged_attention_triton")


@pytest.fixture(scope="module", autouse=True)
def interpreter():
    with triton_interpreter(TRITON_MODULES):
        yield


# -- packing -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_int8_per_channel_round_trip_is_within_half_a_step(dtype):
    w = weights(96, 320, dtype=dtype)
    q = quantize_int8(w)
    assert q.qweight.dtype == torch.int8 and q.scales.shape == (1, 96) and q.group_size == 320
    assert (q.qweight.abs().amax(1) == 127).all()  # every row's largest weight uses the range
    err = (q.dequantize() - w.float()).abs()
    step = q.scales.float()[0][:, None]
    assert (err <= step / 2 * 1.01 + 1e-7).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_int4_group_128_round_trip_is_within_half_a_step_of_its_group(dtype):
    w = weights(40, 384, seed=1, dtype=dtype)
    q = quantize_int4(w)
    assert q.qweight.dtype == torch.int32 and q.qweight.shape == (48, 40)
    assert q.scales.shape == q.zeros.shape == (3, 40)
    values = unpack_int4(q.qweight)
    assert values.min() == 0 and values.max() == 15
    err = (q.dequantize() - w.float()).abs().view(40, 3, 128)
    step = q.scales.float().t()[:, :, None]
    assert (err <= step / 2 * 1.01 + 1e-5).all()
    # and no worse on average than rounding errors uniform in +-step/2 would be
    assert err.pow(2).mean() <= 1.1 * step.pow(2).mean() / 12


def test_int4_packing_puts_input_8p_plus_j_in_bits_4j_of_word_p():
    q = torch.zeros(3, 16, dtype=torch.int32)
    q[1, 8 + 5] = 0xB  # output 1, input 13 = 8 * 1 + 5
    q[2, 7] = 0xF  # output 2, input 7: the top nibble, the sign bit of the word
    packed = pack_int4(q)
    assert packed.shape == (2, 3)
    assert packed[1, 1].item() == 0xB << 20
    assert packed[0, 2].item() == -(1 << 28)  # 0xF0000000 as int32
    assert torch.equal(unpack_int4(packed), q)


def test_constant_groups_quantize_exactly():
    w = torch.full((4, 128), 0.25)
    assert torch.equal(quantize_int4(w).dequantize(), w)
    assert torch.equal(quantize_int8(torch.zeros(2, 64)).dequantize(), torch.zeros(2, 64))


def test_quantizers_reject_what_they_cannot_pack():
    with pytest.raises(ValueError, match="not a multiple of the group size 128"):
        quantize_int4(torch.randn(8, 200))
    with pytest.raises(ValueError, match="must be 2-D"):
        quantize_int8(torch.randn(8))
    with pytest.raises(ValueError, match="unknown weight quantization 'int3'"):
        quantize(torch.randn(8, 128), "int3")


# -- the Triton matmul against the reference ----------------------------------------------
MATMUL_CASES = [  # (rows, N, K, split_k): N never a multiple of the 64/128-wide tiles
    (1, 200, 384, None), (1, 200, 384, 2), (16, 72, 896, 3),  # GEMV, split-K
    (5, 40, 128, None),
    (17, 200, 384, None), (70, 130, 256, None),  # GEMM: M past one and two 64-row tiles
]


@pytest.mark.parametrize("kind", ["int8", "int8/32", "int4", "int4/32"])
@pytest.mark.parametrize("rows,n,k,split_k", MATMUL_CASES)
def test_triton_matmul_equals_reference(kind, rows, n, k, split_k):
    from kernels.matmul_triton import matmul

    quant, _, group = kind.partition("/")
    w = quantize(weights(n, k, seed=n + k), quant, int(group) if group else None)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows))
    close(matmul(x, w, split_k=split_k), linear_reference(x, w), 1e-5)


def test_triton_int8_matmul_masks_k_that_is_no_multiple_of_the_tile():
    from kernels.matmul_triton import matmul

    w = quantize_int8(weights(50, 200))  # per channel: K = 200 is one group
    for rows in (3, 20):
        x = torch.randn(rows, 200)
        close(matmul(x, w), linear_reference(x, w), 1e-5)


def test_triton_matmul_in_float16_equals_reference():
    from kernels.matmul_triton import matmul

    x = torch.randn(4, 256).half()
    for w in (quantize_int8(weights(96, 256)), quantize_int4(weights(96, 256))):
        out = matmul(x, w)
        assert out.dtype == torch.float16
        close(out, linear_reference(x.float(), w), 2e-3)


def test_linear_dispatch_runs_triton_when_asked_with_batch_dims_and_bias():
    w = quantize_int4(weights(64, 256))
    x, bias = torch.randn(2, 3, 256), torch.randn(64)
    out = linear(x, w, bias, backend="triton")
    assert out.shape == (2, 3, 64)
    close(out, linear(x, w, bias), 1e-5)
    with pytest.raises(ValueError, match="expects 256"):
        linear(torch.randn(2, 128), w)


def test_dispatch_uses_the_reference_on_the_cpu_and_names_a_bad_setting(monkeypatch):
    assert choose_backend(torch.zeros(1)) == "torch"
    monkeypatch.setenv("EMBER_KERNELS", "cutlass")
    with pytest.raises(ValueError, match="unknown kernel backend 'cutlass'"):
        choose_backend(torch.zeros(1))


# -- the Triton paged-attention decode against the engine's torch attention ----------------
@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (8, 2), (16, 2)])  # GQA ratios 1, 4, 8
@pytest.mark.parametrize("lens", [
    [16, 32, 1],  # ending exactly on block boundaries, and a single token
    [17, 33, 2],  # just past a boundary
    [256, 257, 300],  # exactly one 256-token partition, and just past it: two, merged
])
def test_triton_paged_decode_equals_reference(heads, kv_heads, lens):
    args = paged_case(lens, heads, kv_heads, 64)
    out = paged_decode(*args, scale=0.125, backend="triton")
    close(out, paged_decode_reference(*args, scale=0.125), 1e-5)


@pytest.mark.parametrize("window", [1, 40, 256])
def test_triton_paged_decode_with_a_sliding_window(window):
    args = paged_case([1, 39, 40, 41, 300], 8, 2, 64, seed=window)
    out = paged_decode(*args, scale=0.125, window=window, backend="triton")
    close(out, paged_decode_reference(*args, scale=0.125, window=window), 1e-5)


@pytest.mark.parametrize("dim,dtype", [(80, torch.float32), (256, torch.float32),
                                       (128, torch.float16)])
def test_triton_paged_decode_head_sizes_and_float16(dim, dtype):
    args = paged_case([20, 47], 8, 1, dim, dtype=dtype)
    out = paged_decode(*args, scale=dim ** -0.5, backend="triton")
    assert out.dtype == dtype
    ref = paged_decode_reference(*[a.float() if a.is_floating_point() else a for a in args],
                                 scale=dim ** -0.5)
    close(out, ref, 1e-5 if dtype == torch.float32 else 3e-3)


# -- the multi-row (verification) decode against the torch reference -----------------------
@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (8, 2)])  # GQA ratios 1 and 4
@pytest.mark.parametrize("rows", [1, 2, 5, 9])
def test_triton_paged_verify_equals_reference(heads, kv_heads, rows):
    # sequences of different lengths in one launch, ending mid-block and on a boundary;
    # each brings 1..rows real rows (a decode beside verifications of several lengths)
    lens, n_rows = [23, 48, 9, 300], [rows, 1, min(rows, 3), max(1, rows - 1)]
    args = verify_case(lens, n_rows, rows, heads, kv_heads, 32, seed=rows)
    out = paged_verify(*args, scale=32 ** -0.5, backend="triton")
    ref = paged_verify_reference(*args, scale=32 ** -0.5)
    close(out, ref, 1e-5)
    for i, n in enumerate(n_rows):  # padded rows are zeros, real ones are not
        assert (out[i, n:] == 0).all() and (out[i, :n].abs().amax(-1) > 0).all()


def test_verify_rows_are_causal_and_each_equals_a_decode_at_its_position():
    """Row r of a 5-row verification is exactly the one-row decode of a cache that ends at
    its token: it sees its own proposals before it and none after."""
    lens, rows = [37, 21], 5
    q, k, v, tables, ctx, qlens = verify_case(lens, [5, 5], rows, 8, 2, 32, seed=3)
    out = paged_verify(q, k, v, tables, ctx, qlens, scale=0.2, backend="triton")
    for r in range(rows):
        one = paged_decode_reference(q[:, r], k, v, tables, ctx - rows + 1 + r, scale=0.2)
        close(out[:, r], one, 1e-5)


@pytest.mark.parametrize("window", [1, 20])
def test_triton_paged_verify_with_a_sliding_window(window):
    args = verify_case([19, 40, 300], [4, 2, 4], 4, 8, 2, 32, seed=window)
    out = paged_verify(*args, scale=0.125, window=window, backend="triton")
    close(out, paged_verify_reference(*args, scale=0.125, window=window), 1e-5)


def test_triton_paged_verify_in_float16():
    args = verify_case([20, 47], [3, 2], 3, 8, 1, 64, dtype=torch.float16)
    out = paged_verify(*args, scale=0.125, backend="triton")
    assert out.dtype == torch.float16
    ref = paged_verify_reference(*[a.float() if a.is_floating_point() else a for a in args],
                                 scale=0.125)
    close(out, ref, 3e-3)


# -- the engine on packed weights ---------------------------------------------------------
TINY = ModelConfig("qwen2", 300, 128, 2, 4, 2, 32, 256, 1e-6, 1e6, 512, qkv_bias=True)


def tiny_model(quant: str):
    """A 2-layer random model whose Linear weights are packed: large weights, so greedy
    choices are far from ties and both kernel paths must pick the same tokens."""
    g = torch.Generator().manual_seed(0)
    model = build_model(TINY)
    tensors = {name: torch.ones(p.shape) if name.endswith("norm.weight")
               else torch.randn(p.shape, generator=g) * 0.3
               for name, p in model.named_parameters()}
    model.load_weights(pack_linears(tensors, quant))
    return model.eval()


@pytest.mark.parametrize("quant", ["int8", "int4"])
def test_engine_decodes_the_same_tokens_through_triton_kernels_as_through_torch(
        quant, monkeypatch):
    model = tiny_model(quant)
    assert type(model.layers[0].mlp.gate_up).__name__ == "QuantLinear"
    prompts = [[5, 17, 99, 4, 250, 31, 8, 77, 120, 3, 9, 14, 200, 66, 1, 2, 42], [7, 8]]

    def run() -> list[list[int]]:
        engine = Engine(model, EngineConfig(context=64, max_seqs=2, max_tokens=64),
                        torch.device("cpu"), torch.float32)
        return engine.generate(prompts, 4)

    reference = run()
    monkeypatch.setenv("EMBER_KERNELS", "triton")
    assert run() == reference


def test_engine_verifies_draft_proposals_through_the_triton_multi_row_kernel(monkeypatch):
    """Speculation on the engine with every kernel in Triton (interpreted): the verification
    steps run the multi-row paged kernel, rows padded as a graph replays them, and the
    greedy answer is the one plain decoding through the same kernels gives. The model is
    its own draft, so every step verifies 4 proposals (and keeps them)."""
    model = tiny_model("int8")
    prompt = [5, 17, 99, 4, 250, 31, 8, 77, 120, 3]
    monkeypatch.setenv("EMBER_KERNELS", "triton")

    def run(spec: SpeculativeParams | None) -> tuple[list[int], Engine]:
        engine = Engine(model, EngineConfig(context=64, max_seqs=2, max_tokens=64,
                                            adaptive_speculation=False),
                        torch.device("cpu"), torch.float32)
        engine.use_draft(model, "self")
        engine.runner.pad_rows = True
        return engine.generate([prompt], 12, speculative=spec)[0], engine

    plain, _ = run(None)
    spec, engine = run(SpeculativeParams(method="draft", draft_model="self", max_draft=4))
    assert spec == plain
    assert engine.runner.paths["verify"] > 0 and engine.runner.paths["prefill"] == 1


def tiny_llama_gguf(path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """A 1-layer llama GGUF (hidden 128, 4 heads, 2 kv heads) whose attention weights are
    Q8_0 and MLP weights F32, as written by the `gguf` package; and the float values."""
    import gguf

    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(256)
    writer.add_embedding_length(128)
    writer.add_feed_forward_length(256)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)
    shapes = {"token_embd": (64, 128), "blk.0.attn_q": (128, 128), "blk.0.attn_k": (64, 128),
              "blk.0.attn_v": (64, 128), "blk.0.attn_output": (128, 128),
              "blk.0.ffn_gate": (256, 128), "blk.0.ffn_up": (256, 128),
              "blk.0.ffn_down": (128, 256), "output": (64, 128)}
    values = {}
    for name, shape in shapes.items():
        w = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        if name.startswith("blk.0.attn") or name == "output":
            data = gguf.quants.quantize(w, GGMLQuantizationType.Q8_0)
            writer.add_tensor(f"{name}.weight", data, raw_dtype=GGMLQuantizationType.Q8_0)
            w = dequantize(data, GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(f"{name}.weight", w)
        values[f"{name}.weight"] = w
    for name in ("blk.0.attn_norm", "blk.0.ffn_norm", "output_norm"):
        writer.add_tensor(f"{name}.weight", np.ones(128, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path, values


def test_loader_packs_every_linear_and_keeps_q8_0_tensors_exact(tmp_path):
    path, values = tiny_llama_gguf(tmp_path / "tiny.gguf")
    f32 = load_weights(path).tensors
    int8 = load_weights(path, quant="int8").tensors
    int4 = load_weights(path, quant="int4").tensors
    linears = [n for n in f32 if LINEAR.fullmatch(n)]
    assert len(linears) == 8
    for name in linears:
        assert isinstance(int8[name], Int8Weight) and isinstance(int4[name], Int4Weight)
        assert int4[name].group_size == 128
        from_q8_0_file = ".attn." in name or name == "output.weight"
        assert int8[name].group_size == (32 if from_q8_0_file else f32[name].shape[1])
        if from_q8_0_file:  # q and k went through the float path (llama's row permutation)
            assert torch.equal(int8[name].dequantize(), f32[name]), name
    assert torch.equal(int8["layers.0.attn.v.weight"].dequantize(),
                       torch.from_numpy(values["blk.0.attn_v.weight"]))
    assert torch.equal(int8["tok_embd.weight"], f32["tok_embd.weight"])  # not a Linear
