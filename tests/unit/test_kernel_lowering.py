"""The paged-attention and GEMV kernels lower to sm_90 (H100/H200) binaries on a machine
without a GPU: Triton's compiler and the ptxas in its wheel need no device. The interpreter tier
(test_kernels.py) checks what the kernel computes; this checks that the same source, with
the multi-row verification shapes and the GEMV's layouts and row buckets, is valid compiled
Triton (no interpreter-only constructs).
It compiles in a child process: tests/conftest.py sets TRITON_INTERPRET for this one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIGNATURE = {"q_ptr": "*{dt}", "k_ptr": "*{dt}", "v_ptr": "*{dt}", "table_ptr": "*i64",
             "lens_ptr": "*i64", "qlens_ptr": "*i64", "out_ptr": "*fp32", "lse_ptr": "*fp32",
             "stride_table": "i32", "stride_slot": "i32", "n_parts": "i32", "scale": "fp32",
             "window": "i32"}


def assert_compiles_in_a_child(cases_name: str, compile_name: str) -> None:
    """Run `compile_name(*case)` for each of `cases_name` (names in this module) in a child
    process without TRITON_INTERPRET: each must give an sm_90 ELF within an H100/H200 SM's
    shared memory."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = (f"import json; from tests.unit.test_kernel_lowering import {cases_name}, "
            f"{compile_name}; print(json.dumps([{compile_name}(*c) for c in {cases_name}]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    cases = globals()[cases_name]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == len(cases)
    for case, result in zip(cases, results, strict=True):
        assert result["magic"] == "7f454c46", case  # an ELF: a real sm_90 binary
        assert result["shared"] <= 228 * 1024, case  # fits an H100/H200 SM's shared memory


def compile_sm90(rows: int, group: int, dt: str, precision: str) -> dict:
    """Compile the kernel (not interpreted) for sm_90: the binary's first bytes, its shared
    memory."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernels.paged_attention_triton import _paged_decode_kernel

    const = dict(HEADS=2 * group, KV_HEADS=2, HEAD_DIM=128, ROWS=rows, PAGE=16,
                 PARTITION=256, BLOCK_M=max(16, triton.next_power_of_2(rows * group)),
                 BLOCK_D=128, BLOCK_N=64, PRECISION=precision)
    signature = {n: t.format(dt=dt) for n, t in SIGNATURE.items()} | \
        {n: "constexpr" for n in const}
    compiled = triton.compile(ASTSource(fn=_paged_decode_kernel, signature=signature,
                                        constexprs=const),
                              target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": 4, "num_stages": 2})
    return {"magic": compiled.asm["cubin"][:4].hex(), "shared": compiled.metadata.shared}


CASES = [
    (1, 4, "bf16", "tf32"),  # a decode at Llama-3-8B's grouping
    (9, 4, "bf16", "tf32"),  # the largest verification: 36 (row, head) pairs in a 64 tile
    (9, 7, "fp32", "ieee"),  # Qwen2.5-0.5B's grouping (63 pairs), float32 as the CPU tests
]


def test_paged_attention_kernel_compiles_for_sm90_for_decode_and_verification():
    assert_compiles_in_a_child("CASES", "compile_sm90")

GEMV_SIGNATURE = {"x_ptr": "*{dt}", "q_ptr": "*{q}", "s_ptr": "*fp16", "z_ptr": "*fp16",
                  "out_ptr": "*{out}", "M": "i32", "N": "i32", "K": "i32",
                  "k_per_split": "i32"}


def compile_gemv_sm90(bits: int, scales: int, rows: int, dt: str, split: bool) -> dict:
    """The GEMV kernel (kernels/gemv_triton.py) compiled for sm_90 with one layout (`bits`,
    `scales`: per channel 0, per K step 1, per weight 2) and row bucket; its split-K form
    writes float32 partials, which the sum kernel adds."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernels.gemv_triton import _gemv_kernel, _sum_splits_kernel

    const = dict(BITS=bits, GROUP=4096 if scales == 0 else 32 if scales == 2 else 128,
                 SCALES=scales, BLOCK_M=rows, BLOCK_N=128, BLOCK_K=64)
    types = {"dt": dt, "q": "i32" if bits == 4 else "i8", "out": "fp32" if split else dt}
    signature = {n: t.format(**types) for n, t in GEMV_SIGNATURE.items()} | \
        {n: "constexpr" for n in const}
    target = GPUTarget("cuda", 90, 32)
    compiled = triton.compile(ASTSource(fn=_gemv_kernel, signature=signature, constexprs=const),
                              target=target, options={"num_warps": 4, "num_stages": 2})
    if split:
        triton.compile(ASTSource(fn=_sum_splits_kernel,
                                 signature={"part_ptr": "*fp32", "out_ptr": f"*{dt}",
                                            "size": "i32", "splits": "i32",
                                            "BLOCK": "constexpr"},
                                 constexprs={"BLOCK": 1024}),
                       target=target, options={"num_warps": 4})
    return {"magic": compiled.asm["cubin"][:4].hex(), "shared": compiled.metadata.shared}


GEMV_CASES = [  # about 12 s of compiling each: the layouts' branches, the extreme buckets
    (4, 1, 1, "bf16", False),  # int4 group 128 at batch 1: the decode's case
    (4, 2, 16, "bf16", True),  # int4, groups shorter than a step, 16 rows, split-K
    (8, 0, 8, "fp16", True),  # per-channel int8, split-K
]


def test_gemv_kernel_compiles_for_sm90_in_every_layout_and_row_bucket():
    assert_compiles_in_a_child("GEMV_CASES", "compile_gemv_sm90")
