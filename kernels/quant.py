"""Weight-only quantization: float weights (bf16/fp16/fp32) and GGUF's Q8_0/Q4_K blocks into
the two layouts the matmul kernels read.

Layouts (a Linear's weight W is (N, K): N outputs, K inputs; groups run along K):

- `Int8Weight`: symmetric, w = q * scale. `qweight` int8 (N, K), row-major as nn.Linear keeps
  it, so the reference is gpt-fast's `F.linear(x, q.to(dtype)) * scales`. `scales`
  (K // group, N). Per output channel (the default) is group = K, scales (1, N).
- `Int4Weight`: asymmetric, w = q * scale + zero with q in 0..15 and `zero` a float (the
  value q = 0 stands for, the group's minimum), group 128 by default. `qweight` int32
  (K // 8, N): word [p, n] holds k = 8p .. 8p+7 of output n, k = 8p + j in bits 4j..4j+3.
  This is GPTQ's packing: a tile of words is contiguous along N, so the threads of a warp
  that own neighbouring outputs read neighbouring words (coalesced), and one word row feeds
  8 rows of a K-tile after unpacking in registers. `scales`, `zeros` (K // group, N).

Scales and zeros are float16 by default (bf16 keeps 8 mantissa bits: a 0.4% error on every
weight of a group; fp16's range covers weight scales). Rounding is plain round-to-nearest
from the group's min/max (int4) or absolute max (int8), no error search.

GGUF conversions (block formats as the `gguf` package's quants.py reads them):
- Q8_0 (blocks of 32: float16 d, 32 int8): with group 32 the int8 values and d are kept
  exactly, 8.5 bits a weight as in the file; per channel (group None) re-scales every row to
  one scale, 8 bits a weight, and adds an error 1.5-1.9x the RMS of Q8_0's own rounding
  (d / sqrt(12)) on Qwen2.5-Coder-0.5B's tensors (docs/notes/kernels-quant.md). The loader
  keeps group 32: the file's values bit for bit, for 6% more bytes than per channel.
- Q4_K (super-blocks of 256: d, dmin, eight 32-weight sub-blocks with 6-bit scale and min,
  w = d*sc*q - dmin*m): with group 32 it is exact (pass float32 scales to keep the products
  d*sc exact). Group 128 (the loader's int4) merges four sub-blocks of different scales and
  so re-quantizes: on Qwen2.5-Coder-0.5B's Q4_K tensors the added error's RMS is 1.2-1.3x
  that of Q4_K's own rounding (d*sc / sqrt(12)), about 10-11% of the weights' RMS (same
  note), in exchange for 4.25 bits a weight instead of 5 at group 32 with float16 scales and
  zeros.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import Q4_K

INT4_GROUP = 128
PACK = 8  # int4 values per int32 word


@dataclass
class Int8Weight:
    qweight: torch.Tensor  # int8 (N, K)
    scales: torch.Tensor  # (K // group_size, N)
    group_size: int

    @property
    def shape(self) -> tuple[int, int]:
        n, k = self.qweight.shape
        return n, k

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        n, k = self.shape
        q = self.qweight.to(dtype).view(n, k // self.group_size, self.group_size)
        return (q * self.scales.to(dtype).t()[:, :, None]).view(n, k)

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"qweight": self.qweight, "scales": self.scales}

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    def to(self, device: torch.device | str) -> Int8Weight:
        return replace(self, qweight=self.qweight.to(device), scales=self.scales.to(device))


@dataclass
class Int4Weight:
    qweight: torch.Tensor  # int32 (K // 8, N), see the module docstring
    scales: torch.Tensor  # (K // group_size, N)
    zeros: torch.Tensor  # (K // group_size, N): the value of q = 0
    group_size: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.qweight.shape[1], self.qweight.shape[0] * PACK

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        n, k = self.shape
        q = unpack_int4(self.qweight).to(dtype).view(n, k // self.group_size, self.group_size)
        s, z = self.scales.to(dtype).t()[:, :, None], self.zeros.to(dtype).t()[:, :, None]
        return (q * s + z).view(n, k)

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"qweight": self.qweight, "scales": self.scales, "zeros": self.zeros}

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    def to(self, device: torch.device | str) -> Int4Weight:
        return replace(self, qweight=self.qweight.to(device), scales=self.scales.to(device),
                       zeros=self.zeros.to(device))


@dataclass
class Fp8Weight:
    """FP8 (e4m3) per output channel: w = q * scale. `qweight` float8_e4m3fn (N, K), row-major
    (its transpose is the column-major operand `torch._scaled_mm` wants); `scales` float32
    (1, N), the layout of a per-channel Int8Weight, so the same references read both."""
    qweight: torch.Tensor  # float8_e4m3fn (N, K)
    scales: torch.Tensor  # float32 (1, N)
    group_size: int  # K: one scale per output channel

    @property
    def shape(self) -> tuple[int, int]:
        n, k = self.qweight.shape
        return n, k

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return (self.qweight.float() * self.scales.float().t()).to(dtype)

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"qweight": self.qweight, "scales": self.scales}

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    def to(self, device: torch.device | str) -> Fp8Weight:
        return replace(self, qweight=self.qweight.to(device), scales=self.scales.to(device))


PackedWeight = Int8Weight | Int4Weight | Fp8Weight
QUANT_TYPES = ("int8", "int4", "fp8")
FP8_MAX = 448.0  # the largest finite float8_e4m3fn


# -- from float weights --------------------------------------------------------------------
def _check(w: torch.Tensor, group: int) -> None:
    if w.dim() != 2:
        raise ValueError(f"a weight to quantize must be 2-D (out, in), got shape "
                         f"{tuple(w.shape)}")
    if not w.is_floating_point():
        raise ValueError(f"a weight to quantize must be floating point, got {w.dtype}")
    if group <= 0 or w.shape[1] % group:
        raise ValueError(f"the input size {w.shape[1]} is not a multiple of the group size "
                         f"{group}")


def quantize_int8(w: torch.Tensor, group_size: int | None = None,
                  scale_dtype: torch.dtype = torch.float16) -> Int8Weight:
    """Symmetric int8 (q in -127..127), per output channel (group_size None) or per group."""
    n, k = w.shape if w.dim() == 2 else (0, 0)
    group = group_size or k
    _check(w, group)
    g = w.float().view(n, k // group, group)
    scales = (g.abs().amax(-1) / 127).to(scale_dtype)
    s = scales.float()
    q = torch.where(s[..., None] > 0, g / s.clamp_min(1e-30)[..., None], 0.0)
    q = q.round().clamp(-127, 127).to(torch.int8).view(n, k)
    return Int8Weight(q.contiguous(), scales.t().contiguous(), group)


def quantize_int4(w: torch.Tensor, group_size: int = INT4_GROUP,
                  scale_dtype: torch.dtype = torch.float16) -> Int4Weight:
    """Asymmetric int4 per group of `group_size` inputs: scale (max - min) / 15, zero min."""
    _check(w, group_size)
    n, k = w.shape
    if k % PACK:
        raise ValueError(f"int4 packs {PACK} inputs per word: {k} is not a multiple of {PACK}")
    g = w.float().view(n, k // group_size, group_size)
    lo, hi = g.amin(-1), g.amax(-1)
    scales = ((hi - lo) / 15).to(scale_dtype)
    zeros = lo.to(scale_dtype)
    # round against the stored (rounded) scale and zero, so they are the ones we correct for
    s, z = scales.float()[..., None], zeros.float()[..., None]
    q = torch.where(s > 0, (g - z) / s.clamp_min(1e-30), 0.0).round().clamp(0, 15)
    return Int4Weight(pack_int4(q.to(torch.int32).view(n, k)), scales.t().contiguous(),
                      zeros.t().contiguous(), group_size)


def quantize_fp8(w: torch.Tensor) -> Fp8Weight:
    """FP8 e4m3 per output channel: scale = absmax / 448 (float32), q = w / scale rounded by
    the float8 cast (round to nearest even). A zero row keeps scale 0 and q 0."""
    n, k = w.shape if w.dim() == 2 else (0, 0)
    _check(w, k or 1)
    g = w.float()
    scales = g.abs().amax(-1) / FP8_MAX  # (N,)
    q = torch.where(scales[:, None] > 0, g / scales.clamp_min(1e-30)[:, None], 0.0)
    q = q.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return Fp8Weight(q.contiguous(), scales[None, :].contiguous(), k)


def quantize(w: torch.Tensor, quant: str, group_size: int | None = None,
             scale_dtype: torch.dtype = torch.float16) -> PackedWeight:
    """`quant` "int8" (group None: per channel), "int4" (group None: 128) or "fp8" (per
    channel always: `group_size` must be None)."""
    if quant == "fp8":
        if group_size is not None:
            raise ValueError(f"fp8 weights have one scale per output channel, not groups of "
                             f"{group_size}")
        return quantize_fp8(w)
    if quant == "int8":
        return quantize_int8(w, group_size, scale_dtype)
    if quant == "int4":
        return quantize_int4(w, group_size or INT4_GROUP, scale_dtype)
    raise ValueError(f"unknown weight quantization {quant!r}: use one of "
                     f"{', '.join(QUANT_TYPES)}")


# -- fused projections ---------------------------------------------------------------------
def _regroup(t: torch.Tensor, group: int, target: int) -> torch.Tensor:
    """(K // group, N) scales or zeros as (K // target, N): each row repeated, exact."""
    return t if group == target else t.repeat_interleave(group // target, dim=0)


def concat_outputs(parts: list[PackedWeight]) -> PackedWeight:
    """One weight whose outputs are `parts`' outputs in order (fused q/k/v, gate/up): the same
    layout, concatenated along N, which is dim 0 of an (N, K) qweight and dim 1 of every
    (groups, N) scale, zero and int4 (K // 8, N) word tensor. Parts with different group
    sizes (a Q8_0 tensor beside a per-channel one) meet at the smallest group, whose scales
    repeat the larger groups' exactly; groups that do not divide each other are an error."""
    kinds = {type(p) for p in parts}
    if len(kinds) != 1:
        raise ValueError(f"cannot fuse weights of different layouts: "
                         f"{sorted(k.__name__ for k in kinds)}")
    ks = {p.shape[1] for p in parts}
    if len(ks) != 1:
        raise ValueError(f"cannot fuse weights with different input sizes {sorted(ks)}")
    group = min(p.group_size for p in parts)
    if any(p.group_size % group for p in parts):
        raise ValueError(f"cannot fuse weights with group sizes "
                         f"{sorted({p.group_size for p in parts})}: none divides the others")
    first = parts[0]
    scales = torch.cat([_regroup(p.scales, p.group_size, group) for p in parts], dim=1)
    if isinstance(first, Int4Weight):
        return Int4Weight(torch.cat([p.qweight for p in parts], dim=1), scales,
                          torch.cat([_regroup(p.zeros, p.group_size, group)  # type: ignore[union-attr]
                                     for p in parts], dim=1), group)
    qweight = torch.cat([p.qweight for p in parts], dim=0)
    if isinstance(first, Fp8Weight):
        return Fp8Weight(qweight, scales, group)
    return Int8Weight(qweight, scales, group)


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """(N, K) values 0..15 -> int32 (K // 8, N), k = 8p + j in bits 4j..4j+3 of word p."""
    n, k = q.shape
    q = q.to(torch.int32).view(n, k // PACK, PACK)
    shifts = torch.arange(0, 4 * PACK, 4, dtype=torch.int32, device=q.device)
    # sum of disjoint bit fields == their OR; int32 wraps for nibble 7 >= 8 as intended
    return (q << shifts).sum(-1, dtype=torch.int32).t().contiguous()


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """int32 (K // 8, N) -> int32 (N, K) values 0..15 (the inverse of `pack_int4`)."""
    kp, n = packed.shape
    shifts = torch.arange(0, 4 * PACK, 4, dtype=torch.int32, device=packed.device)
    q = (packed.t()[:, :, None] >> shifts) & 0xF  # (N, K // 8, 8)
    return q.reshape(n, kp * PACK)


# -- from GGUF blocks ----------------------------------------------------------------------
def _blocks(data: np.ndarray, qtype: GGMLQuantizationType, shape: tuple[int, int]
            ) -> np.ndarray:
    """The raw bytes of a (N, K) GGUF tensor as (N, K // block, type_size) uint8."""
    block, size = GGML_QUANT_SIZES[qtype]
    n, k = shape
    if k % block:
        raise ValueError(f"{qtype.name} rows hold whole {block}-value blocks; {k} is not a "
                         f"multiple of {block}")
    raw = np.ascontiguousarray(data).view(np.uint8)
    if raw.size != n * (k // block) * size:
        raise ValueError(f"{raw.size} bytes are not a {qtype.name} tensor of shape {shape}")
    return raw.reshape(n, k // block, size)


def from_q8_0(data: np.ndarray, shape: tuple[int, int], group_size: int | None = 32,
              scale_dtype: torch.dtype = torch.float16) -> Int8Weight:
    """GGUF Q8_0 -> int8. Group 32 keeps the file's values exactly; any other group (None:
    per channel) re-scales the dequantized weights."""
    blocks = _blocks(data, GGMLQuantizationType.Q8_0, shape)
    d = blocks[..., :2].copy().view(np.float16)[..., 0]  # (N, K // 32)
    qs = blocks[..., 2:].copy().view(np.int8)  # (N, K // 32, 32)
    if group_size == 32:
        return Int8Weight(torch.from_numpy(qs.reshape(shape)),
                          torch.from_numpy(d.T.copy()).to(scale_dtype), 32)
    w = torch.from_numpy(qs.astype(np.float32) * d.astype(np.float32)[..., None])
    return quantize_int8(w.view(shape), group_size, scale_dtype)


def q4_k_parts(data: np.ndarray, shape: tuple[int, int]
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GGUF Q4_K -> (q (N, K) 0..15, scale (N, K // 32), zero (N, K // 32)) in float32 with
    w = q * scale + zero: each 32-weight sub-block is exactly an asymmetric int4 group."""
    blocks = _blocks(data, GGMLQuantizationType.Q4_K, shape)
    n, nb, _ = blocks.shape
    flat = blocks.reshape(n * nb, -1)
    d = flat[:, 0:2].copy().view(np.float16).astype(np.float32)
    dmin = flat[:, 2:4].copy().view(np.float16).astype(np.float32)
    sc, m = Q4_K.get_scale_min(flat[:, 4:16].copy())  # gguf's own 6-bit unpacking
    # 128 bytes of nibbles: 4 chunks of 32 bytes; low nibbles are sub-block 2c, high 2c+1
    qs = flat[:, 16:].reshape(-1, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    q = (qs & 0x0F).reshape(n, nb * 256)
    scale = (d * sc.astype(np.float32)).reshape(n, nb * 8)
    zero = -(dmin * m.astype(np.float32)).reshape(n, nb * 8)
    return torch.from_numpy(q.astype(np.int32)), torch.from_numpy(scale), torch.from_numpy(zero)


def from_q4_k(data: np.ndarray, shape: tuple[int, int], group_size: int = INT4_GROUP,
              scale_dtype: torch.dtype = torch.float16) -> Int4Weight:
    """GGUF Q4_K -> int4. Group 32 is exact (use float32 scales to keep the products d * sc
    exact); a larger group re-quantizes the dequantized weights (see the module docstring)."""
    q, scale, zero = q4_k_parts(data, shape)
    if group_size == 32:
        return Int4Weight(pack_int4(q), scale.t().contiguous().to(scale_dtype),
                          zero.t().contiguous().to(scale_dtype), 32)
    n, k = shape
    w = q.float().view(n, k // 32, 32) * scale[..., None] + zero[..., None]
    return quantize_int4(w.view(n, k), group_size, scale_dtype)
