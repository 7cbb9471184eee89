"""Layers every architecture shares: RMSNorm, rotary embeddings, paged attention, gated MLP.

Attention over the paged KV cache: prefill is plain torch (`scaled_dot_product_attention`
with an explicit mask; on the GPU torch's fused SDPA paths); decode goes through
`kernels.paged_attention.paged_decode`, and a speculative verification (several rows per
sequence) through `paged_verify`: the Triton kernel on CUDA, the same plain torch elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from backends.cuda.context import Context
from backends.cuda.fuse import fuse_projections
from backends.cuda.model_config import ModelConfig
from kernels.matmul import linear
from kernels.paged_attention import attention_mask, gather_blocks, paged_decode, paged_verify
from kernels.quant import Fp8Weight, Int4Weight, Int8Weight, PackedWeight


class RMSNorm(nn.Module):
    """x * w / rms(x), computed in fp32. Gemma's (1 + w) is folded into w by the loader."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:  # torch's fused kernel (float32 inside): one launch instead of eight
            return F.rms_norm(x, (x.shape[-1],), self.weight.to(x.dtype), self.eps)
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x * self.weight.float()).to(dtype)


class Rotary(nn.Module):
    """NeoX-style rotary embedding (halves rotate together), as Hugging Face applies it;
    the loader has undone llama.cpp's Q/K permutation for models stored for pair rotation."""

    inv_freq: torch.Tensor  # a buffer (register_buffer), which nn.Module types as Any module

    def __init__(self, head_dim: int, theta: float, scaling: float = 1.0,
                 freq_factors: tuple[float, ...] | None = None) -> None:
        super().__init__()
        self.head_dim, self.theta, self.scaling = head_dim, theta, scaling
        self.freq_factors = freq_factors
        self.register_buffer("inv_freq", self.frequencies(), persistent=False)

    def frequencies(self, device: torch.device | str = "cpu") -> torch.Tensor:
        d = self.head_dim
        inv = 1.0 / (self.theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d))
        if self.freq_factors is not None:
            inv = inv / torch.tensor(self.freq_factors, dtype=torch.float32, device=device)
        return inv / self.scaling

    def prepare(self, positions: torch.Tensor) -> None:
        """The cos and sin rows of these positions, for every layer of this forward pass
        (CausalLM.forward calls it first, so a captured CUDA graph computes them too):
        (tokens, 1, head_dim) each, halves [cos, cos] and [-sin, sin]."""
        freqs = positions.float()[:, None] * self.inv_freq[None, :]  # (tokens, head_dim/2)
        cos, sin = freqs.cos(), freqs.sin()
        self._positions = positions
        self._cos = torch.cat((cos, cos), dim=-1)[:, None, :]
        self._sin = torch.cat((-sin, sin), dim=-1)[:, None, :]

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                ) -> tuple[torch.Tensor, torch.Tensor]:
        if getattr(self, "_positions", None) is not positions:
            self.prepare(positions)
        # q and k rotate together: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), as
        # x * [cos, cos] + [x2, x1] * [-sin, sin], the same float32 operations elementwise
        x = torch.cat((q, k), dim=1).float()
        x1, x2 = x.chunk(2, dim=-1)
        out = (x * self._cos + torch.cat((x2, x1), dim=-1) * self._sin).to(q.dtype)
        return out[:, :q.shape[1]], out[:, q.shape[1]:]


class PagedAttention(nn.Module):
    """Stores this step's K/V in the cache, then attends over each sequence's cached keys.
    `k_cache`/`v_cache` (slots, kv_heads, head_dim) are views the model runner assigns."""

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float,
                 sliding_window: int = 0) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.scale, self.window = scale, sliding_window
        self.k_cache = torch.empty(0)
        self.v_cache = torch.empty(0)
        self.block_size = 16

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                ctx: Context) -> torch.Tensor:
        # q: (tokens, heads, dim); k, v: (tokens, kv_heads, dim)
        slots, tables = ctx.slot_mapping, ctx.block_tables
        if self.window and ctx.local_block_tables is not None and \
                ctx.local_slot_mapping is not None:
            slots, tables = ctx.local_slot_mapping, ctx.local_block_tables
        self.k_cache[slots] = k.to(self.k_cache.dtype)
        self.v_cache[slots] = v.to(self.v_cache.dtype)
        if ctx.is_decode:
            return self._decode(q, tables, ctx)
        return self._prefill(q, tables, ctx)

    def _decode(self, q: torch.Tensor, tables: torch.Tensor, ctx: Context) -> torch.Tensor:
        if ctx.rows > 1:  # a verification: one launch for every sequence's rows
            assert ctx.query_rows is not None  # the runner sets both
            n, heads, dim = q.shape
            out = paged_verify(q.view(n // ctx.rows, ctx.rows, heads, dim), self.k_cache,
                               self.v_cache, tables, ctx.context_lens, ctx.query_rows,
                               self.scale, self.window, self.block_size)
            return out.view(n, heads, dim)
        return paged_decode(q, self.k_cache, self.v_cache, tables, ctx.context_lens,
                            self.scale, self.window, self.block_size)

    def _prefill(self, q: torch.Tensor, tables: torch.Tensor, ctx: Context) -> torch.Tensor:
        assert ctx.query_lens is not None and ctx.context_lens_list is not None  # a prefill
        outs, start = [], 0
        for i, (n_q, n_ctx) in enumerate(zip(ctx.query_lens, ctx.context_lens_list,
                                             strict=True)):
            table = tables[i:i + 1, :-(-n_ctx // self.block_size)]
            k = gather_blocks(self.k_cache, table, self.block_size)[:, :, :n_ctx]
            v = gather_blocks(self.v_cache, table, self.block_size)[:, :, :n_ctx]
            q_pos = torch.arange(n_ctx - n_q, n_ctx, device=q.device)
            mask = attention_mask(q_pos, n_ctx, self.window)
            qi = q[start:start + n_q].transpose(0, 1)[None]  # (1, heads, n_q, dim)
            out = F.scaled_dot_product_attention(qi, k.to(q.dtype), v.to(q.dtype),
                                                 attn_mask=mask, scale=self.scale,
                                                 enable_gqa=True)
            outs.append(out[0].transpose(0, 1))
            start += n_q
        return torch.cat(outs)


class QuantLinear(nn.Module):
    """A Linear whose weight is packed (kernels.quant), run by `kernels.matmul.linear`.
    The packed tensors are buffers, so `.to(device)` moves them with the model."""

    qweight: torch.Tensor  # the buffers `weight.tensors()` registers (zeros: int4 only)
    scales: torch.Tensor
    zeros: torch.Tensor

    def __init__(self, weight: PackedWeight, bias: bool) -> None:
        super().__init__()
        self.kind = type(weight)
        self.group_size = weight.group_size
        self.out_features, self.in_features = weight.shape
        for name, t in weight.tensors().items():
            self.register_buffer(name, t)
        self.bias = (nn.Parameter(torch.empty(self.out_features, device="meta"))
                     if bias else None)  # the loader's bias replaces it (load_state_dict)

    @property
    def packed(self) -> PackedWeight:
        if self.kind is Int8Weight:
            return Int8Weight(self.qweight, self.scales, self.group_size)
        if self.kind is Fp8Weight:
            return Fp8Weight(self.qweight, self.scales, self.group_size)
        return Int4Weight(self.qweight, self.scales, self.zeros, self.group_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.packed, self.bias)


class GatedMLP(nn.Module):
    """down(act(gate(x)) * up(x)), gate and up as one projection (backends/cuda/fuse.py):
    its output's halves are views; act * up is two elementwise launches eagerly and one under
    torch.compile (EngineConfig.compile)."""

    def __init__(self, hidden: int, intermediate: int,
                 act: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.gate_up = nn.Linear(hidden, 2 * intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(self.act(gate) * up)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


class Attention(nn.Module):
    """The fused Q/K/V projection (optional bias; its output split by views into q, k and
    v, GQA's k/v narrower than q), optional per-head RMSNorm of q and k, rotary
    embedding, paged attention, output projection: the attention block of every model here."""

    def __init__(self, hidden: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 scale: float, rotary: Rotary, eps: float, bias: bool = False,
                 qk_norm: bool = False, sliding_window: int = 0) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.qkv = nn.Linear(hidden, (num_heads + 2 * num_kv_heads) * head_dim, bias=bias)
        self.o = nn.Linear(num_heads * head_dim, hidden, bias=False)
        self.q_norm = RMSNorm(head_dim, eps) if qk_norm else None
        self.k_norm = RMSNorm(head_dim, eps) if qk_norm else None
        self.rotary = rotary
        self.attn = PagedAttention(num_heads, num_kv_heads, head_dim, scale, sliding_window)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, ctx: Context) -> torch.Tensor:
        n, d = x.shape[0], self.head_dim
        qkv = self.qkv(x)
        q, k, v = qkv.split([self.num_heads * d, self.num_kv_heads * d,
                             self.num_kv_heads * d], dim=-1)
        q = q.view(n, self.num_heads, d)
        k, v = k.view(n, self.num_kv_heads, d), v.view(n, self.num_kv_heads, d)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self.rotary(positions, q, k)
        return self.o(self.attn(q, k, v, ctx).reshape(n, -1))


class CausalLM(nn.Module):
    """What the model runner needs from every architecture: embed, layers, final norm and
    the output head (tied to the embedding where the checkpoint has none)."""

    embed_scale = 1.0
    # what each architecture's __init__ sets
    config: ModelConfig
    tok_embd: nn.Embedding
    layers: nn.ModuleList
    output_norm: RMSNorm
    output: nn.Linear | None

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                ctx: Context) -> torch.Tensor:
        for rotary in self.rotaries():
            rotary.prepare(positions)  # once per pass, not once per layer
        h = self.tok_embd(input_ids)
        if self.embed_scale != 1.0:
            h = h * self.embed_scale
        for layer in self.layers:
            h = layer(h, positions, ctx)
        return self.output_norm(h)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.output is None:
            return F.linear(hidden, self.tok_embd.weight).float()
        return self.output(hidden).float()

    def rotaries(self) -> list[Rotary]:
        """The model's rotary embeddings (one, or Gemma's local and global), each once."""
        found = self.__dict__.get("_rotaries")
        if found is None:
            unique = {id(m): m for m in self.modules() if isinstance(m, Rotary)}
            found = self.__dict__["_rotaries"] = list(unique.values())
        return found

    def attention_layers(self) -> list[PagedAttention]:
        """Each layer's paged attention, in layer order (each layer holds one)."""
        return [m for m in self.modules() if isinstance(m, PagedAttention)]

    def load_weights(self, tensors: dict[str, torch.Tensor | PackedWeight]) -> None:
        """Take the loader's tensors as the parameters (no copy). The model is built on the
        meta device, so no time goes into random initialisation of weights we replace.
        Separate q/k/v and gate/up tensors are fused first (backends/cuda/fuse.py).
        A packed (int8/int4/fp8) weight turns its Linear into a `QuantLinear`."""
        tensors = fuse_projections(tensors)
        for name, packed in [(n, t) for n, t in tensors.items()
                             if isinstance(t, Int8Weight | Int4Weight | Fp8Weight)]:
            del tensors[name]
            prefix = name.removesuffix(".weight")
            parent, _, attr = prefix.rpartition(".")
            old = self.get_submodule(prefix)
            setattr(self.get_submodule(parent), attr, QuantLinear(packed, old.bias is not None))
            tensors |= {f"{prefix}.{k}": t for k, t in packed.tensors().items()}
        missing, unexpected = self.load_state_dict(tensors, strict=False, assign=True)
        device = next(t for t in tensors.values() if isinstance(t, torch.Tensor)).device
        for module in self.modules():
            if isinstance(module, Rotary):
                module.inv_freq = module.frequencies(device)
        missing = [m for m in missing if not m.endswith("inv_freq")]
        if missing or unexpected:
            from backends.errors import ModelFileError
            raise ModelFileError(f"the weights do not match the architecture: missing "
                                 f"{missing[:5]}, unexpected {unexpected[:5]}")
