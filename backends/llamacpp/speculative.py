"""Speculative decoding for the llama.cpp backend: who proposes tokens, and how many.

A proposer guesses the next few tokens of a sequence; the engine (engine.BatchEngine) puts
them behind the sequence's pending token in one batch, so one forward pass gives the model's
logits at every proposed position, and samples there one position at a time with the request's
own sampler, keeping tokens while they equal the proposal. Every emitted token is therefore a
sample of the model itself given the tokens before it: greedy output is the model's greedy
output, sampled output has the model's distribution, and a seed gives the same answer with or
without speculation (the sampler draws once per emitted token either way). Tokens after the
first mismatch are removed from the KV cache.

Two proposers:
- `NgramLookup` (prompt lookup): the tokens that followed the latest earlier occurrence of the
  sequence's last few tokens, in the prompt or the answer. Free, and right whenever the answer
  copies from its context (editing code, quoting).
- `DraftModel`: a smaller model with the same vocabulary, in a second llama.cpp context with
  one sequence per slot of the engine, proposing its greedy continuation.

How many (`Speculation.choose`): with a per-token acceptance rate a, proposing k tokens yields
(1 - a^(k+1)) / (1 - a) tokens per verification. That step costs the decode time of the batch
with k more rows, plus k draft steps for the draft model, where a plain step costs the batch
without them. `StepTimes` measures both on the running engine, so the choice adapts to the
machine and to the request; when no k beats plain decoding, the request decodes plainly, and
keeps measuring: prompt lookup by checking its guess against each plainly decoded token
(free), the draft model by probing with one token every few steps. And it checks the model
against what speculative steps really gave (tokens over the seconds spent proposing, catching
the draft up and verifying): when that falls below plain decoding, it stops too, and tries
again after a few plain steps (8, then ever more while the tries fall short).
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from typing import Any

import llama_cpp
import numpy as np

from backends.base import SpeculativeParams
from backends.errors import InvalidRequestError, ModelFileError

NGRAM_SIZES = (4, 3, 2)  # longest match first
PRIOR_ROW_COST = 0.2  # one more batch row, as a share of a 1-row decode, until measured
DRAFT_MIN_P = 0.3  # the draft stops proposing when its top token is less likely than this
PROBE_EVERY = 8  # plain steps before speculation that was off looks again, at first
MAX_PROBE_EVERY = 128  # ... doubling after each look that did not turn it back on
MIN_GAIN = 1.05  # speculate only when the model predicts at least this speedup
REALIZED_AFTER = 3  # speculative steps measured before their real gain can switch it off


class NgramLookup:
    """Prompt lookup: an index from each n-gram of the text so far to where it last ended."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens: list[int] = []
        self._next: dict[tuple[int, ...], int] = {}  # n-gram -> index of the token after it
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        for tok in tokens:
            p = len(self.tokens)
            for n in NGRAM_SIZES:
                if p >= n:
                    self._next[tuple(self.tokens[p - n:p])] = p
            self.tokens.append(tok)

    def propose(self, k: int) -> list[int]:
        for n in NGRAM_SIZES:
            if len(self.tokens) <= n:
                continue
            start = self._next.get(tuple(self.tokens[-n:]))
            if start is not None:
                return self.tokens[start:start + k]
        return []


@dataclass
class StepTimes:
    """Measured seconds of a decode by its number of batch rows (moving averages)."""
    rows: dict[int, float] = field(default_factory=dict)

    def record(self, n_rows: int, seconds: float) -> None:
        old = self.rows.get(n_rows)
        self.rows[n_rows] = seconds if old is None else 0.8 * old + 0.2 * seconds

    def cost(self, n_rows: int) -> float:
        """The time of a decode with `n_rows` rows: measured, or interpolated between the
        nearest measured sizes, or extrapolated with the prior slope from the nearest one."""
        if n_rows in self.rows:
            return self.rows[n_rows]
        if not self.rows:
            return 1.0 + PRIOR_ROW_COST * (n_rows - 1)
        below = [r for r in self.rows if r < n_rows]
        above = [r for r in self.rows if r > n_rows]
        if below and above:
            lo, hi = max(below), min(above)
            f = (n_rows - lo) / (hi - lo)
            return self.rows[lo] * (1 - f) + self.rows[hi] * f
        near = max(below) if below else min(above)
        one_row = self.rows[near] / (1 + PRIOR_ROW_COST * (near - 1))
        return one_row * (1 + PRIOR_ROW_COST * (n_rows - 1))


@dataclass
class Speculation:
    """One request's speculative state: its proposer, acceptance estimate and counts."""
    params: SpeculativeParams
    lookup: NgramLookup | None = None
    draft: DraftModel | None = None
    accepted_seen: float = 3.0  # prior: a = 0.6 until measured (decaying counts)
    rejected_seen: float = 2.0
    off_steps: int = 0
    shadow: int | None = None  # prompt lookup's guess for a step decoded plainly
    proposed: int = 0
    accepted: int = 0
    # what speculative steps really gave: tokens and seconds (proposing, catching the draft
    # up, verifying), decaying sums; the check on the cost model's promise
    got_tokens: float = 0.0
    got_seconds: float = 0.0
    measured_steps: int = 0
    propose_s: float = 0.0  # this step's share of the proposing time
    probe_every: int = PROBE_EVERY
    remaining: int = 0  # tokens the request may still produce (set by the engine)

    @property
    def acceptance(self) -> float:
        return self.accepted_seen / (self.accepted_seen + self.rejected_seen)

    def observe(self, proposed: int, accepted: int) -> None:
        """A verification of `proposed` tokens kept `accepted` of them (stopping at the first
        rejection): `accepted` successes, and one failure unless all were kept."""
        self.accepted_seen = 0.9 * self.accepted_seen + accepted
        self.rejected_seen = 0.9 * self.rejected_seen + (1 if accepted < proposed else 0)

    def realize(self, tokens: int, seconds: float) -> None:
        self.got_tokens = 0.8 * self.got_tokens + tokens
        self.got_seconds = 0.8 * self.got_seconds + seconds
        self.measured_steps += 1

    def realized_gain(self, plain_step_s: float) -> float | None:
        """Tokens per plain step's time that speculation really gave, once measured."""
        if self.measured_steps < REALIZED_AFTER or self.got_seconds <= 0:
            return None
        return self.got_tokens / self.got_seconds * plain_step_s

    def choose(self, limit: int, rows: int, times: StepTimes, catch_up: int = 0) -> int:
        """How many tokens to propose now (0: decode plainly), for a batch of `rows` other
        rows. `limit`: the tokens the request may still produce (and the context hold);
        `catch_up`: tokens the draft model would first have to evaluate (a new prompt)."""
        limit = min(limit, self.params.max_draft)
        if limit <= 0:
            return 0
        if not self.params.adaptive:
            return limit
        a = min(self.acceptance, 0.99)
        plain = times.cost(rows)
        draft_step = catch_up_s = 0.0
        if self.draft is not None:
            draft_step = self.draft.round_s if self.draft.round_s is not None else 0.3 * plain
            per_token = (self.draft.prefill_s if self.draft.prefill_s is not None
                         else 0.25 * draft_step)
            catch_up_s = catch_up * per_token
        best_k, best_gain = 0, MIN_GAIN
        for k in range(1, limit + 1):
            tokens = (1 - a ** (k + 1)) / (1 - a)
            cost = times.cost(rows + k) + k * draft_step
            gain = tokens * plain / cost
            # the time saved over the rest of the answer must pay for the draft's catch-up
            saved = (self.remaining * plain) * (1 - 1 / gain) if gain > 1 else 0.0
            if gain > best_gain and saved > catch_up_s:
                best_k, best_gain = k, gain
        realized = self.realized_gain(plain) if times.rows else None
        if realized is not None and realized < 1.0:
            best_k = 0  # the model promised more than the steps gave: decode plainly
        if best_k:
            self.off_steps = 0
            if realized is not None:  # measured to pay: look again soon when it stops
                self.probe_every = PROBE_EVERY
            return best_k
        self.off_steps += 1
        # look again now and then, less often each time it does not pay: forget what the
        # last speculative steps gave (a few rejections where an edit departs from the
        # copied text must not switch speculation off for the rest of the answer), and
        # probe the draft model with one token (prompt lookup needs no probe: the engine
        # checks its guess against each plainly decoded token)
        if self.off_steps >= self.probe_every and (self.draft is None or catch_up_s < plain):
            self.off_steps = 0
            self.probe_every = min(2 * self.probe_every, MAX_PROBE_EVERY)
            self.got_tokens = self.got_seconds = 0.0
            self.measured_steps = 0
            return 1 if self.draft is not None else 0
        return 0


class DraftModel:
    """A smaller model with the same vocabulary, proposing its greedy continuation. Its context
    has one sequence per engine slot, with the same ids; each sequence's cache follows the
    slot's tokens lazily (the common prefix is kept, the rest recomputed when proposing)."""

    def __init__(self, path: str, n_seq: int, n_ctx_seq: int, threads: int,
                 target: Any) -> None:
        from llama_cpp._internals import LlamaBatch, LlamaContext, LlamaModel

        self.path = path
        mparams = llama_cpp.llama_model_default_params()
        try:
            self.model = LlamaModel(path_model=path, params=mparams, verbose=False)
        except (ValueError, RuntimeError) as e:
            raise ModelFileError(f"{path}: llama.cpp could not load the draft model ({e})") from e
        try:
            check_same_vocab(target, self.model)
            cparams = llama_cpp.llama_context_default_params()
            cparams.n_ctx = n_ctx_seq * n_seq
            cparams.n_batch = cparams.n_ubatch = 512
            cparams.n_seq_max = n_seq
            cparams.kv_unified = True  # one pass per batch (see LlamaCppBackend.load)
            cparams.n_threads = cparams.n_threads_batch = threads
            self.ctx = LlamaContext(model=self.model, params=cparams, verbose=False)
        except BaseException:
            self.model.close()
            raise
        self.n_batch = 512
        self.n_vocab = self.model.n_vocab()
        self.batch = LlamaBatch(n_tokens=self.n_batch, embd=0, n_seq_max=n_seq, verbose=False)
        self._memory = llama_cpp.llama_get_memory(self.ctx.ctx)
        self.cached: dict[int, list[int]] = {}  # seq id -> tokens its cache holds
        self.round_s: float | None = None  # measured time of one proposing round
        self.prefill_s: float | None = None  # measured time per caught-up token

    def close(self) -> None:
        self.batch.close()
        self.ctx.close()
        self.model.close()

    def behind(self, seq: int, history: list[int]) -> int:
        """How many tokens of `history` the draft would have to evaluate before proposing."""
        return len(history) - 1 - min(common_prefix(self.cached.get(seq, []), history),
                                      len(history) - 1)

    def forget_all(self) -> None:
        self.cached.clear()
        llama_cpp.llama_memory_clear(self._memory, True)

    def propose(self, wants: list[tuple[int, list[int], int]]) -> list[list[int]]:
        """For each (seq id, tokens so far, k): up to k greedy next tokens, in one batch per
        round for all sequences. Stops a sequence early where the draft is unsure."""
        todo: dict[int, int] = {}  # seq id -> the token to evaluate next round
        out: dict[int, list[int]] = {}
        ks = {seq: k for seq, _, k in wants}
        for seq, history, _ in wants:
            have = self.cached.get(seq, [])
            keep = min(common_prefix(have, history), len(history) - 1)
            if keep < len(have):
                llama_cpp.llama_memory_seq_rm(self._memory, seq, keep, -1)
            self.cached[seq] = history[:keep]
            self._catch_up(seq, history[keep:-1])
            todo[seq] = history[-1]
            out[seq] = []
        while todo:
            rows = self._round(todo)
            todo = {}
            for seq, row in rows.items():
                token, p = self._top(row)
                if p < DRAFT_MIN_P and out[seq]:
                    continue
                out[seq].append(token)
                if len(out[seq]) < ks[seq]:
                    todo[seq] = token
        return [out[seq] for seq, _, _ in wants]

    def _catch_up(self, seq: int, tokens: list[int]) -> None:
        """Evaluate tokens the draft has not seen (a new prompt), without logits."""
        began = time.perf_counter()
        for start in range(0, len(tokens), self.n_batch):
            piece = tokens[start:start + self.n_batch]
            self.batch.reset()
            b = self.batch.batch
            pos0 = len(self.cached[seq])
            for i, tok in enumerate(piece):
                b.token[i], b.pos[i] = tok, pos0 + i
                b.seq_id[i][0], b.n_seq_id[i] = seq, 1
                b.logits[i] = False
            b.n_tokens = len(piece)
            self.ctx.decode(self.batch)
            self.cached[seq] += piece
        if len(tokens) >= 16:  # long enough to time
            per_token = (time.perf_counter() - began) / len(tokens)
            old = self.prefill_s
            self.prefill_s = per_token if old is None else 0.8 * old + 0.2 * per_token

    def _round(self, todo: dict[int, int]) -> dict[int, int]:
        """One token for each sequence, in one batch; the batch row of each sequence."""
        self.batch.reset()
        b = self.batch.batch
        rows = {}
        for i, (seq, tok) in enumerate(todo.items()):
            b.token[i], b.pos[i] = tok, len(self.cached[seq])
            b.seq_id[i][0], b.n_seq_id[i] = seq, 1
            b.logits[i] = True
            rows[seq] = i
            self.cached[seq].append(tok)
        b.n_tokens = len(todo)
        start = time.perf_counter()
        self.ctx.decode(self.batch)
        took = time.perf_counter() - start
        self.round_s = took if self.round_s is None else 0.8 * self.round_s + 0.2 * took
        return rows

    def _top(self, row: int) -> tuple[int, float]:
        logits = logits_row(self.ctx.ctx, row, self.n_vocab)
        token = int(logits.argmax())
        top = float(logits[token])
        p = 1.0 / float(np.exp(logits - top).sum())
        return token, p


def logits_row(ctx: Any, row: int, n_vocab: int) -> np.ndarray:
    """A batch row's logits as a numpy view of llama.cpp's buffer (valid until the next
    decode on `ctx`)."""
    ptr = llama_cpp.llama_get_logits_ith(ctx, row)
    return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)),
                                 shape=(n_vocab,))


def check_same_vocab(target: Any, draft: Any) -> None:
    """The draft must tokenize like the target: same size (or the target's padded larger),
    same special tokens, and the same text for a spread of ids."""
    n_t, n_d = target.n_vocab(), draft.n_vocab()
    why = None
    if abs(n_t - n_d) > 128:
        why = f"vocabularies of {n_t} and {n_d} tokens"
    elif (target.token_bos(), target.token_eos()) != (draft.token_bos(), draft.token_eos()):
        why = "different BOS/EOS tokens"
    else:
        for tok in range(0, min(n_t, n_d), max(1, min(n_t, n_d) // 512)):
            if target.token_get_text(tok) != draft.token_get_text(tok):
                why = f"token {tok} is {target.token_get_text(tok)!r} in one and " \
                      f"{draft.token_get_text(tok)!r} in the other"
                break
    if why:
        raise InvalidRequestError(f"the draft model does not share the model's tokenizer "
                                  f"({why}): pick a smaller model of the same family")


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
