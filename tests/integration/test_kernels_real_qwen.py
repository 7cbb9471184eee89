"""kernels/ on the real Qwen2.5-Coder-0.5B-Instruct: its Q8_0 and Q4_K tensors converted to
the int8/int4 layouts, and the engine with every Linear packed as int8 against float32.
(The kernels on their own, under Triton's interpreter: tests/unit/test_kernels.py.)"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

from backends.base import LoadPlan
from backends.cuda import CudaBackend
from backends.cuda.engine import Engine
from backends.cuda.loader import pack_linears
from backends.cuda.models import build_model
from backends.errors import InvalidRequestError
from kernels.quant import (
    Int4Weight,
    from_q4_k,
    from_q8_0,
    q4_k_parts,
    quantize_int8,
)

TEXT_FILE = Path(os.__file__).parent / "LICENSE.txt"


# -- GGUF blocks against gguf's own dequantization, on the real Qwen2.5-Coder-0.5B ----------
@pytest.fixture(scope="module")
def qwen_gguf(qwen) -> GGUFReader:
    return GGUFReader(qwen.path)  # about 40 s here (its tokenizer fields): read once


def gguf_tensor(reader: GGUFReader, name: str):
    t = next(t for t in reader.tensors if t.name == name)
    shape = (int(t.shape[1]), int(t.shape[0]))
    ref = torch.from_numpy(np.array(dequantize(t.data, t.tensor_type), np.float32))
    return t, shape, ref.view(shape)


@pytest.mark.slow
def test_q8_0_converts_exactly_at_its_blocks_and_rescaled_per_channel_within_2x(qwen_gguf):
    t, shape, ref = gguf_tensor(qwen_gguf, "blk.0.attn_v.weight")
    assert t.tensor_type == GGMLQuantizationType.Q8_0 and shape == (128, 896)
    exact = from_q8_0(t.data, shape)
    assert exact.group_size == 32 and torch.equal(exact.dequantize(), ref)
    # the loader's route for permuted (llama) q/k rows: re-quantizing the values at the same
    # 32-blocks finds the same scales (each block's largest |q| is 127), so it is exact too
    assert torch.equal(quantize_int8(ref, 32).dequantize(), ref)
    per_channel = from_q8_0(t.data, shape, group_size=None)
    assert per_channel.scales.shape == (1, 128)
    d = exact.scales.float()  # Q8_0's own step, per block
    own = (d.pow(2).mean() / 12).sqrt()  # RMS of a rounding error uniform in +-d/2
    added = (per_channel.dequantize() - ref).pow(2).mean().sqrt()
    assert added < 2.0 * own  # measured 1.87x on this tensor


@pytest.mark.slow
def test_q4_k_converts_exactly_at_group_32_and_requantizes_at_128(qwen_gguf):
    t, shape, ref = gguf_tensor(qwen_gguf, "blk.2.ffn_down.weight")
    assert t.tensor_type == GGMLQuantizationType.Q4_K and shape == (896, 4864)
    exact = from_q4_k(t.data, shape, group_size=32, scale_dtype=torch.float32)
    assert torch.equal(exact.dequantize(), ref)
    g128 = from_q4_k(t.data, shape)
    assert isinstance(g128, Int4Weight) and g128.group_size == 128
    _, scale, _ = q4_k_parts(t.data, shape)
    own = (scale.pow(2).mean() / 12).sqrt()
    err = g128.dequantize() - ref
    assert err.pow(2).mean().sqrt() < 1.4 * own  # measured 1.21x on this tensor
    step = g128.scales.float().t().repeat_interleave(128, 1)
    assert (err.abs() <= step / 2 * 1.01 + 1e-4).all()


@pytest.fixture(scope="module")
def qwen_engines(qwen):
    """The float32 engine as the backend loads it, and one on the same model with every Linear
    packed as int8 per channel (the loader's int8 keeps Q8_0 tensors exactly at group 32;
    per channel is the lossier layout, and reading the file once saves a minute here)."""
    f32 = CudaBackend(max_seqs=1)
    f32.load(qwen, LoadPlan(context=512, threads=2, parallel=1, batch=256))
    model = f32.engine.runner.model
    int8 = build_model(model.config)
    int8.load_weights(pack_linears(model.state_dict(), "int8"))
    engine = Engine(int8.eval(), f32.engine.config, torch.device("cpu"), torch.float32,
                    f32.tokenizer.is_eog)
    yield f32, engine
    f32.unload()


@pytest.mark.slow
def test_int8_qwen_agrees_with_the_float32_engine(qwen_engines):
    f32, int8 = qwen_engines
    assert type(int8.runner.model.layers[0].attn.qkv).__name__ == "QuantLinear"
    tokens = f32.tokenizer.encode(TEXT_FILE.read_text())[:160]
    top1 = (int8.score(tokens).argmax(-1) == f32.engine.score(tokens).argmax(-1))
    print(f"\nint8 Qwen2.5-Coder-0.5B: top-1 agreement with float32 {top1.float().mean():.2%}")
    assert top1.float().mean() >= 0.95


@pytest.mark.slow
def test_int8_qwen_writes_the_same_greedy_code(qwen_engines):
    f32, int8 = qwen_engines
    prompt = f32.tokenizer.encode("def fibonacci(n):")
    ours = int8.generate([prompt], 8)[0]
    assert ours == f32.engine.generate([prompt], 8)[0]
    assert "if n" in b"".join(f32.tokenizer.piece(t) for t in ours).decode()


@pytest.mark.slow
def test_loading_with_an_unknown_quantization_is_a_clear_error(qwen):
    with pytest.raises(InvalidRequestError, match="unknown weight quantization 'fp4'"):
        CudaBackend().load(qwen, LoadPlan(context=256, threads=1, quant="fp4"))
