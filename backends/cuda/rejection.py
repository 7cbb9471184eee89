"""Verifying proposed tokens so the output is exactly the model's own (speculative decoding).

The model scored k proposed tokens in one pass: k + 1 rows of logits, row i predicting the
token after proposal i (row 0: after the last accepted token). Greedy: a proposal stands
while it equals the row's argmax, and the first row that disagrees gives its argmax. With
temperature: the rejection sampler of Leviathan et al. 2023 (arXiv 2211.17192, Algorithm 1):
accept proposal d with probability min(1, p(d)/q(d)); on the first rejection draw from
max(p - q, 0) normalized; if all pass draw one more ("bonus") token from the last row. Every
emitted token is then distributed as p, the model's distribution after the sampler's own
processing (repetition penalty, top-k, top-p, min-p, temperature). A proposal that came
from no distribution (prompt lookup) has q = one-hot.
"""

from __future__ import annotations

import torch

from backends.base import SamplingParams
from backends.cuda.sampler import PENALTY_LAST_N, filtered_probs, masked, repetition_penalty


def processed_rows(logits: torch.Tensor, params: SamplingParams, history: list[int],
                   proposals: list[int], allowed: list | None = None) -> torch.Tensor:
    """The rows as the sampler sees them: each one masked by the grammar's state after the
    proposals it follows (`allowed`, one boolean row per position, when the request has a
    grammar), penalized over the tokens before it (`history`, then those proposals), then
    turned into probabilities unless the request is greedy (then the penalized logits)."""
    rows = []
    for i, row in enumerate(logits.float().cpu()):
        if allowed is not None:
            row = masked(row, allowed[i])
        if params.repeat_penalty != 1.0:
            recent = (history + proposals[:i])[-PENALTY_LAST_N:]
            if recent:
                row = repetition_penalty(row, recent, params.repeat_penalty)
        rows.append(row if params.temperature == 0.0 else filtered_probs(row, params))
    return torch.stack(rows)


def verify_greedy(argmax: list[int], proposals: list[int]) -> list[int]:
    """The accepted proposals, then the model's own next token (len(argmax) = k + 1)."""
    out: list[int] = []
    for d, best in zip(proposals, argmax, strict=False):
        if d != best:
            break
        out.append(d)
    out.append(argmax[len(out)])
    return out


def rejection_sample(p: torch.Tensor, q: torch.Tensor | None, proposals: list[int],
                     generator: torch.Generator) -> list[int]:
    """`p`: (k + 1, vocab) the model's probabilities; `q`: (k, vocab) the proposer's, or
    None for one-hot proposals. Returns the accepted proposals and one drawn token."""
    out: list[int] = []
    for i, d in enumerate(proposals):
        q_d = 1.0 if q is None else float(q[i, d])
        u = float(torch.rand((), generator=generator))
        if u * q_d < float(p[i, d]):  # probability min(1, p(d) / q(d))
            out.append(d)
            continue
        if q is None:
            residual = p[i].clone()
            residual[d] = 0.0
        else:
            residual = (p[i] - q[i]).clamp_min(0.0)
        if float(residual.sum()) <= 0.0:
            residual = p[i]  # p == q up to rounding: rejection had probability ~0
        out.append(int(torch.multinomial(residual, 1, generator=generator)))
        return out
    out.append(int(torch.multinomial(p[len(proposals)], 1, generator=generator)))
    return out
