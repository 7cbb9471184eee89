"""Speculative decoding in the llama.cpp backend: how the engine verifies, and the draft model.

A proposer guesses the next few tokens of a sequence; the engine (engine.BatchEngine) puts
them behind the sequence's pending token in one batch, so one forward pass gives the model's
logits at every proposed position, and samples there one position at a time with the request's
own sampler, keeping tokens while they equal the proposal. Every emitted token is therefore a
sample of the model itself given the tokens before it: greedy output is the model's greedy
output, sampled output has the model's distribution, and a seed gives the same answer with or
without speculation (the sampler draws once per emitted token either way). Tokens after the
first mismatch are removed from the KV cache.

The engine-agnostic half (prompt lookup's index, the cost model that picks how many tokens
to propose, switching off and retrying) is backends.speculation. What is this backend's own is
here: `DraftModel`, a smaller model with the same vocabulary in a second llama.cpp context
with one sequence per slot of the engine, proposing its greedy continuation and timing its
steps for the cost model.
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from backends.errors import ModelFileError
from backends.speculation.vocab import check_draft_vocabulary

DRAFT_MIN_P = 0.3  # the draft stops proposing when its top token is less likely than this


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
            check_draft_vocabulary(vocabulary(target), vocabulary(self.model),
                                   Path(path).name, (target.token_bos(), target.token_eos()),
                                   (self.model.token_bos(), self.model.token_eos()))
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


def vocabulary(model: Any) -> list[str]:
    """Every token's text, by id (a LlamaModel's)."""
    return [model.token_get_text(i) for i in range(model.n_vocab())]


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
