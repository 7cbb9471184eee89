"""Concurrent requests on one MLX model: mlx-lm's BatchGenerator, plus a prompt cache.

BatchGenerator does continuous batching: new prompts are prefilled (in `prefill_step`-token
pieces, so a step stays short and a cancel lands quickly), then join the decode batch; every
sequence has its own sampler, processors and token limit. We add what Ember's protocol needs:
stream ids, cancellation, stop strings (TextStream), and Stats.

Prompt cache: when a request ends, its KV cache (prompt + answer) goes into mlx-lm's
LRUPromptCache under its tokens. A new request takes a copy of the entry sharing the longest
prefix with its prompt, trimmed to that prefix, so a conversation's next turn computes only
its new tokens (Stats.cached_tokens counts the reused ones).

Speculative requests (`Job.proposer` set) run outside the batch: BatchGenerator decodes one
token per sequence per step, while speculation verifies several proposed tokens of one
sequence in one forward pass. Each step advances every speculative request by one
propose-and-verify round (backends.mlx.speculative) next to the batch's decode. They share the
prompt cache with the batched requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.generate import BatchGenerator, StopSequences
from mlx_lm.models.cache import LRUPromptCache, trim_prompt_cache

from backends.base import ErrorEvent, Event, FinishReason
from backends.grammar import Constraint
from backends.job import BaseJob
from backends.logprobs import token_logprob
from backends.mlx.sampler import GrammarProcessor, RawLogits
from backends.mlx.speculative import Proposer, SpeculativeRun

MODEL_KEY = "model"  # LRUPromptCache keys entries by model too; a backend holds one


@dataclass
class Job(BaseJob):
    """A request in the engine (backends.job.BaseJob) and its decoding state."""
    prompt: list[int]
    max_new: int
    sampler: Any
    processors: list
    uid: int = -1
    reused: int = 0
    n_out: int = 0
    proposer: Proposer | None = None  # speculative decoding: who proposes tokens
    max_draft: int = 0
    run: SpeculativeRun | None = None
    grammar: Constraint | None = None  # constrained decoding (a processor in the batch)
    raw: RawLogits | None = None  # the raw rows of a batched request that asked for logprobs


class MlxEngine:
    def __init__(self, model: Any, pieces: list[bytes], eog: frozenset[int], parallel: int,
                 prefill_step: int, cache_entries: int, cache_bytes: int,
                 token_bytes: list[bytes] | None = None) -> None:
        self.model, self.pieces, self.eog = model, pieces, eog
        # a token as logprobs show it (control tokens too): the answer's text hides them
        self.token_bytes = token_bytes or pieces
        self.parallel, self.prefill_step = parallel, prefill_step
        self.cache = LRUPromptCache(max_size=cache_entries, max_bytes=cache_bytes)
        self.jobs: dict[int, Job] = {}  # BatchGenerator's uids; speculative jobs below 0
        self.generator = self._new_generator()
        self._next_solo_uid = -1

    def _new_generator(self) -> BatchGenerator:
        return BatchGenerator(self.model, stop_tokens=[[t] for t in sorted(self.eog)],
                              completion_batch_size=self.parallel,
                              prefill_batch_size=self.parallel,
                              prefill_step_size=self.prefill_step)

    def close(self) -> None:
        self.generator.close()
        self.jobs.clear()
        self.cache.trim_to(n_sequences=0)

    def has_work(self) -> bool:
        return bool(self.jobs)

    def submit(self, job: Job) -> None:
        cache, rest = self.cache.fetch_nearest_cache(MODEL_KEY, job.prompt)
        if cache is not None and not rest:
            # the whole prompt is cached; BatchGenerator needs one token to start from
            trim_prompt_cache(cache, 1)
            rest = job.prompt[-1:]
        job.reused = len(job.prompt) - len(rest)
        if job.proposer is not None:
            job.run = SpeculativeRun(self.model, job.proposer, job.prompt, cache, job.sampler,
                                     job.processors, job.max_draft, self.prefill_step,
                                     job.grammar, self.eog)
            job.uid, self._next_solo_uid = self._next_solo_uid, self._next_solo_uid - 1
            self.jobs[job.uid] = job
            return
        if job.request.logprobs is not None:
            job.raw = RawLogits()  # first, so it sees the row before any other processor
        (job.uid,) = self.generator.insert(
            [rest], max_tokens=[job.max_new],
            caches=[cache] if cache is not None else None,
            all_tokens=[job.prompt[:job.reused]],
            samplers=[job.sampler],
            logits_processors=[([job.raw] if job.raw is not None else []) + job.processors
                               + ([GrammarProcessor(job.grammar)]
                                  if job.grammar is not None else [])],
            stop_sequences=[StopSequences([[t] for t in sorted(self.eog)])])
        self.jobs[job.uid] = job

    def fail_all(self, message: str) -> list[tuple[str, Event]]:
        """End every request with an error and start from a clean generator and cache."""
        jobs, self.jobs = list(self.jobs.values()), {}
        self.generator.close()
        self.generator = self._new_generator()
        self.cache.trim_to(n_sequences=0)
        return [(job.stream_id, ErrorEvent(message)) for job in jobs]

    def step(self) -> list[tuple[str, Event]]:
        out: list[tuple[str, Event]] = []
        for job in list(self.jobs.values()):
            if job.is_cancelled():
                out += self._remove(job, "cancelled")
        for job in [j for j in self.jobs.values() if j.run is not None]:
            out += self._speculate(job)
        if not any(uid >= 0 for uid in self.jobs):
            return out
        _, responses = self.generator.next()
        for r in responses:
            found = self.jobs.get(r.uid)
            if found is None:
                continue
            job = found
            row = job.raw.rows.popleft() if job.raw is not None else None
            if r.finish_reason == "stop" and r.token in self.eog:
                self._keep_cache(r.all_tokens, r.prompt_cache)
                out += self._finish(job, "stop")
                continue
            out += self._accept(job, r.token, row)
            if job.uid not in self.jobs:  # a stop string ended it
                continue
            if r.finish_reason is not None:
                self._keep_cache(r.all_tokens, r.prompt_cache)
                out += self._finish(job, "length")
        return out

    def _speculate(self, job: Job) -> list[tuple[str, Event]]:
        """One propose-and-verify round of a speculative request."""
        assert job.run is not None
        out: list[tuple[str, Event]] = []
        tokens = job.run.step(job.max_new - job.n_out)
        # with logprobs, each token's from the model's own verification row
        rows = list(job.run.rows) if job.request.logprobs is not None else [None] * len(tokens)
        for token, row in zip(tokens, rows, strict=True):
            if token in self.eog:
                return out + self._remove(job, "stop")
            out += self._accept(job, token, row)
            if job.uid not in self.jobs:  # a stop string ended it
                return out
        if job.n_out >= job.max_new:
            out += self._remove(job, "length")
        return out

    def _accept(self, job: Job, token: int,
                row: mx.array | None = None) -> list[tuple[str, Event]]:
        """Stream a token; `row`: the model's raw logits it came from, for its logprob."""
        job.n_out += 1
        logprob = None
        if row is not None:
            logprob = token_logprob(np.array(row.astype(mx.float32)).reshape(-1), token,
                                    job.request.logprobs or 0, self._token_bytes)
        events = job.emitted(self.pieces[token] if 0 <= token < len(self.pieces) else b"",
                             logprob)
        if job.text.stopped:
            events += self._remove(job, "stop")
        return events

    def _token_bytes(self, token: int) -> bytes:
        return self.token_bytes[token] if 0 <= token < len(self.token_bytes) else b""

    def _remove(self, job: Job, reason: FinishReason) -> list[tuple[str, Event]]:
        """End a request the generator is still running (cancelled, or a stop string)."""
        if job.run is not None:  # its cache holds all its tokens but the last
            self._keep_cache(job.run.tokens[:-1], job.run.cache)
            return self._finish(job, reason)
        caches = self.generator.remove([job.uid], return_prompt_caches=True)
        if job.uid in caches:
            cache, tokens = caches[job.uid]
            self._keep_cache(tokens, cache)
        return self._finish(job, reason)

    def _keep_cache(self, tokens: list[int] | None, cache: list | None) -> None:
        if tokens and cache:
            self.cache.insert_cache(MODEL_KEY, list(tokens), cache)

    def _finish(self, job: Job, reason: FinishReason) -> list[tuple[str, Event]]:
        self.jobs.pop(job.uid, None)
        return job.finish(reason, prompt_tokens=len(job.prompt), completion_tokens=job.n_out,
                          cached_tokens=job.reused,
                          draft_tokens=job.run.draft_tokens if job.run else 0,
                          accepted_tokens=job.run.accepted_tokens if job.run else 0)
