"""Speculative decoding in the engine: propose tokens, let the model verify them in the step
it runs anyway, keep what it accepts.

A decoding sequence that speculates brings 1 + k query rows to the step instead of 1: its
last token and k proposed ones (from the draft model, draft.py, or from prompt lookup, an
n-gram match over its own tokens). Attention runs over the paged cache with a causal mask
inside those rows, so one forward pass scores every proposal. rejection.py decides what is
accepted; the K/V of the rejected positions is rolled back (their blocks freed, nothing
hashed for the prefix cache but blocks full of accepted tokens).

Under a grammar (Sequence.grammar) proposals are cut at the first token it rejects, each
verified row is masked by the grammar's state after the proposals before it, and the tokens
the sequence keeps move the grammar on: the output is the constrained model's own.

How many tokens to propose, and when to stop and try again, is backends.speculation's (the
cost model and policy every backend uses), over this engine's step times measured by their
number of query rows.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import torch

from backends.cuda.block_manager import BlockManager
from backends.cuda.draft import DraftModel
from backends.cuda.kv_layout import BLOCK_SIZE
from backends.cuda.rejection import processed_rows, rejection_sample, verify_greedy
from backends.cuda.sampler import Sampler
from backends.cuda.scheduler import Scheduled
from backends.cuda.sequence import Sequence
from backends.speculation.cost import DraftCost, StepTimes
from backends.speculation.policy import Speculation


class Speculator:
    """Adds the speculating sequences' proposals to a step, and verifies what the model made
    of them; one `Speculation` (backends.speculation.policy) per sequence decides how many."""

    def __init__(self, blocks: BlockManager, context: int, sampler: Sampler,
                 model_bytes: int, adaptive: bool = True) -> None:
        self.blocks, self.context, self.sampler = blocks, context, sampler
        self.adaptive = adaptive  # False: always propose max_draft (tests, benchmarks)
        self.model_bytes = model_bytes  # the model's weights, to scale a draft's prior cost
        self.draft: DraftModel | None = None
        self.times = StepTimes()
        self.requests: dict[int, Speculation] = {}  # by id() of the sequence
        self.proposals: dict[int, tuple[list[int], torch.Tensor | None]] = {}
        self.propose_s: dict[int, float] = {}  # this step's share of the draft's time
        self.step_s: float | None = None  # the last step's, if it only decoded and verified

    def forget(self, seq: Sequence) -> None:
        self.requests.pop(id(seq), None)
        self.propose_s.pop(id(seq), None)
        if self.draft is not None:
            self.draft.release(seq)

    def _generator(self, seq: Sequence) -> torch.Generator:
        return self.sampler.generator(id(seq), seq.sampling.seed)

    def _speculation(self, seq: Sequence) -> Speculation:
        spec = self.requests.get(id(seq))
        if spec is None:
            params = seq.speculative
            assert params is not None  # only speculating sequences get here (propose)
            if not self.adaptive:
                params = dataclasses.replace(params, adaptive=False)
            spec = self.requests[id(seq)] = Speculation.start(params, seq.tokens)
        elif spec.lookup is not None:
            spec.lookup.follow(seq.tokens)  # what it accepted and decoded since
        return spec

    def _draft_cost(self) -> DraftCost:
        """The draft model's measured step; before one is measured, the model's one-row step
        scaled by the two models' weight sizes (decode reads every weight once)."""
        if self.draft is not None and self.draft.step_s is not None:
            return DraftCost(self.draft.step_s)
        if self.draft is None or not self.times.measured:
            return DraftCost()
        return DraftCost(self.times.cost(1) * self.draft.weight_bytes
                         / max(self.model_bytes, 1))

    def propose(self, scheduled: list[Scheduled]) -> list[Scheduled]:
        """The step with proposals added to the decodes of speculating sequences."""
        decoding = [s for s in scheduled if s.samples and s.num_tokens == 1]
        rows = len(decoding)
        wants: list[tuple[Sequence, int]] = []
        for s in decoding:
            seq = s.seq
            if seq.speculative is None:
                continue
            spec = self._speculation(seq)
            spec.remaining = seq.max_new - seq.num_output
            room = min(seq.max_new - seq.num_output - 1, self.context - len(seq) - 1)
            k = spec.choose(room, self.times, len(decoding), rows,
                            self._draft_cost() if spec.uses_draft else None)
            if k == 0:
                continue
            wants.append((seq, k))
            rows += k
        self.proposals = {}
        for seq, k in wants:
            lookup = self.requests[id(seq)].lookup
            if lookup is not None:
                self.proposals[id(seq)] = (lookup.propose(k), None)
        drafted = [(seq, k) for seq, k in wants if self.requests[id(seq)].uses_draft]
        if drafted and self.draft is not None:
            start = time.perf_counter()
            self.proposals.update(self.draft.propose(drafted, self._generator))
            share = (time.perf_counter() - start) / len(drafted)
            self.propose_s.update((id(seq), share) for seq, _ in drafted)
        for key, (tokens, q) in list(self.proposals.items()):
            grammar = next((seq.grammar for seq, _ in wants if id(seq) == key), None)
            if grammar is not None:
                n = grammar.valid_prefix(tokens)
                self.proposals[key] = (tokens[:n], q[:n] if q is not None else None)
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
        self.step_s = None
        if all(s.samples and s.num_tokens == 1 + s.draft for s in scheduled):
            self.times.record(sum(s.num_tokens for s in scheduled), seconds)
            self.step_s = seconds

    def decoded_plainly(self, seq: Sequence, token: int) -> None:
        """A token the step gave `seq` without proposals (prompt lookup checks its guess)."""
        spec = self.requests.get(id(seq))
        if spec is not None:
            spec.decoded_plainly(token)

    def verify(self, s: Scheduled, logits: torch.Tensor,
               is_eog: Callable[[int], bool]) -> tuple[list[int], Scheduled]:
        """The tokens `s.seq` gets from its 1 + k rows of logits, appended, with the K/V of
        rejected proposals rolled back; and the step as it counts for the cache."""
        seq, k = s.seq, s.draft
        proposals = seq.tokens[len(seq) - k:]
        _, q = self.proposals.get(id(seq), (None, None))
        history = seq.tokens[:len(seq) - k]
        allowed = seq.grammar.allowed_along(proposals) if seq.grammar is not None else None
        rows = processed_rows(logits, seq.sampling, history, proposals, allowed)
        if seq.sampling.temperature == 0.0:
            out = verify_greedy(rows.argmax(-1).tolist(), proposals)
        else:
            q = q[:k] if q is not None else None
            out = rejection_sample(rows, q, proposals, self._generator(seq))
        for i, token in enumerate(out):
            if is_eog(token):
                del out[i + 1:]
                break
            if seq.grammar is not None:
                seq.grammar.accept(token)
        accepted = len(out) - 1
        seq.num_drafted += k
        seq.num_accepted += accepted
        spec = self.requests[id(seq)]
        spec.observe(k, accepted)
        if self.step_s is not None:  # what the step really gave, against the promise
            spec.realize(len(out), self.propose_s.pop(id(seq), 0.0) + self.step_s)
        self.blocks.truncate(seq, len(seq) - k + accepted)
        seq.append(out[-1])
        return out, Scheduled(seq, 1 + accepted)
