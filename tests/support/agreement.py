"""Two numerically different ways to run one llama.cpp model (a q8_0 KV cache against f16, a
reused prefix against a fresh one, batched rows against one row), compared as issue 36 asks:
by teacher-forced agreement with a stated tolerance, not by exact greedy text.

llama.cpp's CPU kernels round a row differently by batch shape and by instruction set (weight
repacking's gemm against gemv, flash attention's split-KV path for one-row steps from 512
cached cells on), so two such paths give greedy answers that part at the first near-tie, at a
different word on an AVX2-only CPU than on an AVX-512 one. What both paths must still give is
the model's answer up to such near-ties: every token of one path's answer, forced through the
other path, is its top choice or within TIE_TOLERANCE of it. A broken path (a cache holding
rejected tokens, a garbled quantization) puts tokens far below the top.
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.llamacpp.backend import LlamaCppBackend

# In logits. Batch shape moved a logit by up to 0.69 (Qwen2.5-Coder-0.5B and 1.5B Q4_K_M,
# a 96-token answer teacher-forced one row at a time against 5 rows at a time, on the x86-64-v3
# baseline and the AVX-512 VNNI build: docs/notes/llamacpp-engine.md, figure 51).
TIE_TOLERANCE = 1.0


@dataclass(frozen=True)
class Agreement:
    gaps: tuple[float, ...]  # per answer token: the position's top logit minus the token's

    @property
    def top_share(self) -> float:
        """The share of tokens that are their position's top choice."""
        return sum(g == 0.0 for g in self.gaps) / len(self.gaps)

    @property
    def worst(self) -> float:
        return max(self.gaps)

    def check(self, min_top_share: float = 0.9) -> None:
        assert self.worst < TIE_TOLERANCE and self.top_share >= min_top_share, (
            f"worst gap {self.worst:.3f} (tolerance {TIE_TOLERANCE}), top choice at "
            f"{self.top_share:.0%} of {len(self.gaps)} tokens: {[round(g, 3) for g in self.gaps]}")


def forced_through(backend: LlamaCppBackend, tokens: list[int], start: int) -> Agreement:
    """tokens[start:] forced through `backend`'s model in plain decoding's shape
    (`LlamaCppBackend.forced_rows`): how far each is below its position's top logit."""
    return Agreement(tuple(float(logits.max() - logits[tokens[i]])
                           for i, logits in backend.forced_rows(tokens, start)))
