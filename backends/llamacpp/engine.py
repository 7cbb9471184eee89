"""Many sequences in one llama.cpp context: the llama.cpp backend's continuous batching.

Each step decodes one batch: the next token of every running sequence, plus prompt chunks of
new ones, within a token budget; every sequence has its own sampler chain (its own seed,
settings and grammar). A new request takes the free slot whose cached tokens share the
longest prefix with its prompt, so a conversation's next turn reuses its KV cache.

Exactness: llama.cpp's CPU numerics depend on the shape of a batch (measured: logits differ
by up to 0.37 when a cached prefix is cut at an arbitrary token). Prompts are evaluated in
CHUNK-token pieces at fixed positions, each piece in a batch of its own (steps alternate
between one prompt piece and the batched decode of every running sequence), and a slot's
cache is reused only up to full pieces. So a prompt's KV cache and first token are exactly
what a fresh start computes, with or without a cache hit, alone or under load; only decode
steps share batches, where a near-tie can flip a later token.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import llama_cpp

from backends.base import (
    CancelFlag,
    DoneEvent,
    ErrorEvent,
    Event,
    GenerationRequest,
    Stats,
    TokenEvent,
)
from backends.text import TextStream

CHUNK = 64  # prompt evaluation piece; 64 and 512 prefill equally fast here (96-97 tok/s)


@dataclass
class Job:
    stream_id: str
    request: GenerationRequest
    cancelled: CancelFlag | None
    prompt: list[int]
    truncated: bool
    sampler: Any  # llama_cpp._internals.LlamaSampler
    max_new: int
    text: TextStream
    started: float = field(default_factory=time.perf_counter)
    pos: int = 0  # prompt tokens already in the KV cache
    reused: int = 0
    next_token: int | None = None  # sampled, not yet in the KV cache
    n_out: int = 0
    first_at: float | None = None
    last_at: float | None = None


@dataclass
class Slot:
    seq_id: int
    tokens: list[int] = field(default_factory=list)  # what this sequence's cache holds
    exact_upto: int = 0  # leading cached tokens bit-identical to a fresh evaluation
    job: Job | None = None
    last_used: float = 0.0


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class BatchEngine:
    def __init__(self, ctx: Any, n_seq: int, n_ctx_seq: int, n_batch: int,
                 detokenize: Callable[[int], bytes], is_eog: Callable[[int], bool]) -> None:
        from llama_cpp._internals import LlamaBatch

        self.ctx, self.n_ctx_seq, self.n_batch = ctx, n_ctx_seq, n_batch
        self.detokenize, self.is_eog = detokenize, is_eog
        self.slots = [Slot(i) for i in range(n_seq)]
        self.waiting: deque[Job] = deque()
        self.batch = LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=n_seq, verbose=False)
        self._memory = llama_cpp.llama_get_memory(ctx.ctx)
        self._prefill_turn = True  # alternate prompt pieces and decode steps

    def close(self) -> None:
        self.batch.close()

    # -- requests --------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        self.waiting.append(job)

    def has_work(self) -> bool:
        return bool(self.waiting) or any(s.job for s in self.slots)

    def _assign(self) -> None:
        while self.waiting:
            free = [s for s in self.slots if s.job is None]
            if not free:
                return
            job = self.waiting.popleft()

            def reusable(slot: Slot, prompt: list[int] = job.prompt) -> int:
                n = min(common_prefix(slot.tokens, prompt), len(prompt) - 1, slot.exact_upto)
                return n // CHUNK * CHUNK

            slot = max(free, key=lambda s: (reusable(s), -s.last_used))
            keep = reusable(slot)
            if keep < len(slot.tokens) and not (
                    keep > 0 and llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id,
                                                               keep, -1)):
                # sliding-window caches cannot drop a suffix: start the sequence over
                llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, -1, -1)
                keep = 0
            slot.tokens = slot.tokens[:keep]
            slot.exact_upto = min(slot.exact_upto, keep)
            slot.job = job
            job.pos = job.reused = keep
            job.max_new = min(job.max_new, self.n_ctx_seq - len(job.prompt))

    def fail_all(self, message: str) -> list[tuple[str, Event]]:
        """End every request with an error (after a failed decode) and clear the caches."""
        jobs = [s.job for s in self.slots if s.job is not None] + list(self.waiting)
        self.waiting.clear()
        for slot in self.slots:
            slot.job, slot.tokens, slot.exact_upto = None, [], 0
        llama_cpp.llama_memory_clear(self._memory, True)
        return [(job.stream_id, ErrorEvent(message)) for job in jobs]

    # -- one step --------------------------------------------------------------------------
    def step(self) -> list[tuple[str, Event]]:
        """Decode one batch; return the events it produced, per stream."""
        self._assign()
        out: list[tuple[str, Event]] = []
        running = [s for s in self.slots if s.job is not None]
        for slot in running:
            if slot.job.cancelled is not None and slot.job.cancelled.is_set():
                out += self._finish(slot, "cancelled")
        running = [s for s in self.slots if s.job is not None]
        if not running:
            return out

        self.batch.reset()
        b = self.batch.batch
        rows: list[tuple[Slot, int, list[int], bool]] = []  # slot, first row, tokens, prefill

        def add(slot: Slot, tokens: list[int], first_pos: int, logits_last: bool) -> None:
            start = b.n_tokens
            for i, tok in enumerate(tokens):
                j = start + i
                b.token[j], b.pos[j] = tok, first_pos + i
                b.seq_id[j][0], b.n_seq_id[j] = slot.seq_id, 1
                b.logits[j] = logits_last and i == len(tokens) - 1
            b.n_tokens = start + len(tokens)
            rows.append((slot, start, tokens, first_pos < len(slot.job.prompt)))

        decoding = [s for s in running if s.job.next_token is not None]
        prefilling = [s for s in running
                      if s.job.next_token is None and s.job.pos < len(s.job.prompt)]
        if prefilling and (self._prefill_turn or not decoding):
            slot = min(prefilling, key=lambda s: s.job.started)  # oldest request first
            job = slot.job
            end = min((job.pos // CHUNK + 1) * CHUNK, len(job.prompt))
            add(slot, job.prompt[job.pos:end], job.pos, end == len(job.prompt))
        else:
            for slot in decoding[: self.n_batch]:
                add(slot, [slot.job.next_token], len(slot.tokens), True)
        self._prefill_turn = not self._prefill_turn
        self.ctx.decode(self.batch)

        for slot, start, tokens, prefill in rows:
            job = slot.job
            slot.tokens += tokens
            if prefill:
                job.pos += len(tokens)
                if job.pos < len(job.prompt):
                    continue
                # full pieces are reused later, not the last one (a longer prompt would
                # evaluate those positions as part of a full piece)
                slot.exact_upto = (len(job.prompt) - 1) // CHUNK * CHUNK
            else:
                job.next_token = None
            token = job.sampler.sample(self.ctx, start + len(tokens) - 1)
            out += self._accept(slot, token)
        return out

    def _accept(self, slot: Slot, token: int) -> list[tuple[str, Event]]:
        job = slot.job
        if self.is_eog(token):
            return self._finish(slot, "stop")
        job.n_out += 1
        job.last_at = time.perf_counter()
        job.first_at = job.first_at or job.last_at
        piece = job.text.push(self.detokenize(token))
        events: list[tuple[str, Event]] = [(job.stream_id, TokenEvent(piece))] if piece else []
        if job.text.stopped:
            return events + self._finish(slot, "stop")
        if job.n_out >= job.max_new:
            return events + self._finish(slot, "length")
        job.next_token = token
        return events

    def _finish(self, slot: Slot, reason: str) -> list[tuple[str, Event]]:
        job = slot.job
        slot.job = None
        slot.last_used = time.monotonic()
        events: list[tuple[str, Event]] = []
        rest = job.text.finish()
        if rest:
            events.append((job.stream_id, TokenEvent(rest)))
        end = time.perf_counter()
        decode_s = (job.last_at - job.first_at) if job.first_at and job.last_at else 0.0
        stats = Stats(
            prompt_tokens=len(job.prompt), completion_tokens=job.n_out,
            ttft_s=round((job.first_at or end) - job.started, 4),
            decode_tokens_per_s=round((job.n_out - 1) / decode_s, 2) if decode_s > 0 else 0.0,
            finish_reason=reason, truncated=job.truncated,  # type: ignore[arg-type]
            total_s=round(end - job.started, 4), cached_tokens=job.reused)
        events.append((job.stream_id, DoneEvent(stats, job.text.text)))
        return events
