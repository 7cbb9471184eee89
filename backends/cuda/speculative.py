"""Speculative decoding in the engine: propose tokens, let the model verify them in the step
it runs anyway, keep what it accepts.

A decoding sequence that speculates brings 1 + k query rows to the step instead of 1: its
last token and k proposed ones (from the draft model, draft.py, or from prompt lookup, an
n-gram match over its own tokens). Attention runs over the paged cache with a causal mask
inside those rows, so one forward pass scores every proposal. rejection.py decides what is
accepted; the K/V of the rejected positions is rolled back (their blocks freed, nothing
hashed for the prefix cache but blocks full of accepted tokens).

How many tokens to propose is a cost model over measured step times, per step and request:

    tokens a step yields   E(k) = 1 + a + a^2 + ... + a^k     (a: the request's acceptance)
    what the step costs    T(rows + k) + k * t_draft          (T: the model's step time)

over the batch, speculating with k is worth it when (B - 1 + E(k)) / cost(k) beats
B / T(rows), B being the sequences that decode this step. The best k wins; k = 0 switches
speculation off for this step. T is the measured time of the model's steps by their number
of query rows (a line through them for sizes not timed yet), t_draft the draft model's
measured step. The acceptance is
a running count of accepted over tried proposals; while a request is not speculating its
evidence fades back to the prior, so it tries again now and then.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from backends.cuda.block_manager import BlockManager
from backends.cuda.draft import DraftModel
from backends.cuda.rejection import processed_rows, rejection_sample, verify_greedy
from backends.cuda.sampler import Sampler
from backends.cuda.scheduler import Scheduled
from backends.cuda.sequence import BLOCK_SIZE, Sequence

# The prior before a request has evidence, worth PRIOR_WEIGHT tried proposals: optimistic
# enough that every request tries speculation, then its own counts take over.
PRIOR_ACCEPTANCE = {"draft": 0.7, "lookup": 0.6}
PRIOR_WEIGHT = 2.0
DECAY_SPECULATING = 0.8  # per verified step: acceptance follows the text as it changes
DECAY_OFF = 0.95  # per step without speculation: half the evidence is gone after ~14 steps
# Before two different step sizes have been timed: one more query row costs this fraction of
# a one-token step (the llama-bench figure for the 1.5B model on this CPU: 4 rows
# for 1.6x of one; measured here for the 0.5B in float32 on one thread: 5 rows for 1.6x).
PRIOR_ROW_COST = 0.2
# A fitted line never prices a row below this fraction of the mean timed step: timing noise
# on a busy machine can make the line flat, and a free-looking row makes any proposal pay.
MIN_ROW_COST = 0.05
LOOKUP_NGRAMS = (3, 2, 1)  # longest match first
TIMING_EMA = 0.3


def lookup(tokens: list[int], k: int) -> list[int]:
    """Prompt lookup: the tokens that followed the latest earlier occurrence of the longest
    suffix n-gram of `tokens` (prompt and answer), up to k of them."""
    for n in LOOKUP_NGRAMS:
        if len(tokens) <= n:
            continue
        tail = tokens[-n:]
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start:start + n] == tail:
                return tokens[start + n:start + n + k]
    return []


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens one verification yields when each proposal holds with `acceptance`."""
    return sum(acceptance ** i for i in range(k + 1))


@dataclass
class StepTimes:
    """Measured seconds of the model's decode/verify steps, by query rows."""
    by_rows: dict[int, float] = field(default_factory=dict)

    def record(self, rows: int, seconds: float) -> None:
        old = self.by_rows.get(rows)
        self.by_rows[rows] = seconds if old is None else \
            (1 - TIMING_EMA) * old + TIMING_EMA * seconds

    def estimate(self, rows: int) -> float | None:
        """The measured time of a step of `rows` rows; for a size not timed yet, a line
        through the sizes that were. (Not a line throughout: the matrix library switches
        kernels with the row count, measured here for the 1.5B on one thread: 1-3 rows cost
        about the same, 4 about twice that.)"""
        if rows in self.by_rows:
            return self.by_rows[rows]
        pts = sorted(self.by_rows.items())
        if not pts:
            return None
        if len(pts) == 1:
            (r1, t1), = pts
            return t1 * (1 + PRIOR_ROW_COST * (rows - 1)) / (1 + PRIOR_ROW_COST * (r1 - 1))
        n = len(pts)
        mx, my = sum(r for r, _ in pts) / n, sum(t for _, t in pts) / n
        slope = sum((r - mx) * (t - my) for r, t in pts) / sum((r - mx) ** 2 for r, _ in pts)
        slope = max(slope, MIN_ROW_COST * my)
        return max(my + slope * (rows - mx), 1e-6)


@dataclass
class Acceptance:
    prior: float
    accepted: float = 0.0
    tried: float = 0.0

    @property
    def rate(self) -> float:
        return (self.accepted + self.prior * PRIOR_WEIGHT) / (self.tried + PRIOR_WEIGHT)

    def update(self, proposed: int, accepted: int) -> None:
        self.accepted = self.accepted * DECAY_SPECULATING + accepted
        # a rejection ends the trials: the proposals after it were never judged
        self.tried = self.tried * DECAY_SPECULATING + accepted + (accepted < proposed)

    def fade(self) -> None:
        self.accepted *= DECAY_OFF
        self.tried *= DECAY_OFF


def best_draft_length(acceptance: float, max_k: int, batch: int, rows: int,
                      times: StepTimes, draft_step_s: float) -> int:
    """The k that maximizes the step's tokens per second (0: do not speculate)."""
    base = times.estimate(rows)
    if base is None:  # nothing timed yet: try a middling length to learn
        return min(4, max_k)
    best, best_rate = 0, batch / base
    for k in range(1, max_k + 1):
        cost = times.estimate(rows + k) + k * draft_step_s
        rate = (batch - 1 + expected_tokens(acceptance, k)) / cost
        if rate > best_rate:
            best, best_rate = k, rate
    return best


class Speculator:
    def __init__(self, blocks: BlockManager, context: int, sampler: Sampler,
                 model_bytes: int, adaptive: bool = True) -> None:
        self.blocks, self.context, self.sampler = blocks, context, sampler
        self.adaptive = adaptive  # False: always propose max_draft (tests, benchmarks)
        self.model_bytes = model_bytes  # the model's weights, to scale a draft's prior cost
        self.draft: DraftModel | None = None
        self.times = StepTimes()
        self.acceptance: dict[int, Acceptance] = {}  # by id() of the sequence
        self.proposals: dict[int, tuple[list[int], torch.Tensor | None]] = {}

    def forget(self, seq: Sequence) -> None:
        self.acceptance.pop(id(seq), None)
        if self.draft is not None:
            self.draft.release(seq)

    def _generator(self, seq: Sequence) -> torch.Generator:
        return self.sampler.generator(id(seq), seq.sampling.seed)

    def _draft_step_s(self) -> float:
        """The draft model's measured step; before one is measured, the model's one-row step
        scaled by the two models' weight sizes (decode reads every weight once)."""
        if self.draft is None:
            return 0.0
        if self.draft.step_s is not None:
            return self.draft.step_s
        one_row = self.times.estimate(1) or 0.0
        return one_row * self.draft.weight_bytes / max(self.model_bytes, 1)

    def propose(self, scheduled: list[Scheduled]) -> list[Scheduled]:
        """The step with proposals added to the decodes of speculating sequences."""
        decoding = [s for s in scheduled if s.samples and s.num_tokens == 1]
        rows = len(decoding)
        wants: list[tuple[Sequence, int]] = []
        for s in decoding:
            seq = s.seq
            if seq.speculative is None:
                continue
            method = seq.speculative.method
            acc = self.acceptance.setdefault(id(seq), Acceptance(PRIOR_ACCEPTANCE[method]))
            room = min(seq.speculative.max_draft, seq.max_new - seq.num_output - 1,
                       self.context - len(seq) - 1)
            step_s = self._draft_step_s() if method == "draft" else 0.0
            if room <= 0:
                k = 0
            elif self.adaptive:
                k = best_draft_length(acc.rate, room, len(decoding), rows, self.times, step_s)
            else:
                k = room
            if k == 0:
                acc.fade()
                continue
            wants.append((seq, k))
            rows += k
        self.proposals = {}
        lookups = [(seq, k) for seq, k in wants if seq.speculative.method == "lookup"]
        for seq, k in lookups:
            self.proposals[id(seq)] = (lookup(seq.tokens, k), None)
        drafted = [(seq, k) for seq, k in wants if seq.speculative.method == "draft"]
        if drafted and self.draft is not None:
            self.proposals.update(self.draft.propose(drafted, self._generator))
        out = []
        for s in scheduled:
            tokens, _ = self.proposals.get(id(s.seq), ([], None))
            if s.num_tokens == 1 and s.samples and tokens:
                tokens = tokens[:self._room_in_blocks(s.seq, len(tokens))]
            if s.num_tokens == 1 and s.samples and tokens:
                s.seq.tokens += tokens
                self.blocks.ensure_slots(s.seq, len(s.seq))
                s = Scheduled(s.seq, 1 + len(tokens), draft=len(tokens))
            out.append(s)
        return out

    def _room_in_blocks(self, seq: Sequence, k: int) -> int:
        """How many of k proposals the free KV blocks take (speculation never preempts)."""
        have = len(seq.block_table) * BLOCK_SIZE
        while k > 0 and -(-(len(seq) + k - have) // BLOCK_SIZE) > self.blocks.num_free:
            k -= 1
        return k

    def record(self, scheduled: list[Scheduled], seconds: float) -> None:
        """Time a step that only decoded or verified (prompt chunks would skew the line)."""
        if all(s.samples and s.num_tokens == 1 + s.draft for s in scheduled):
            self.times.record(sum(s.num_tokens for s in scheduled), seconds)

    def verify(self, s: Scheduled, logits: torch.Tensor,
               is_eog) -> tuple[list[int], Scheduled]:
        """The tokens `s.seq` gets from its 1 + k rows of logits, appended, with the K/V of
        rejected proposals rolled back; and the step as it counts for the cache."""
        seq, k = s.seq, s.draft
        proposals = seq.tokens[len(seq) - k:]
        _, q = self.proposals.get(id(seq), (None, None))
        history = seq.tokens[:len(seq) - k]
        rows = processed_rows(logits, seq.sampling, history, proposals)
        if seq.sampling.temperature == 0.0:
            out = verify_greedy(rows.argmax(-1).tolist(), proposals)
        else:
            q = q[:k] if q is not None else None
            out = rejection_sample(rows, q, proposals, self._generator(seq))
        for i, token in enumerate(out):
            if is_eog(token):
                del out[i + 1:]
                break
        accepted = len(out) - 1
        seq.num_drafted += k
        seq.num_accepted += accepted
        self.acceptance[id(seq)].update(k, accepted)
        self.blocks.truncate(seq, len(seq) - k + accepted)
        seq.append(out[-1])
        return out, Scheduled(seq, 1 + accepted)
