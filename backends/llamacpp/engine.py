"""Many sequences in one llama.cpp context: the llama.cpp backend's continuous batching.

Each step decodes one batch: the next token of every running sequence, plus prompt chunks of
new ones, within a token budget; every sequence has its own sampler chain (its own seed,
settings and grammar). A new request takes the free slot whose cached tokens share the
longest prefix with its prompt, so a conversation's next turn reuses its KV cache. A slot
also keeps the logits its last prompt ended on, so the same prompt again (a regenerated
answer, a retried request) evaluates nothing and samples its first token from them. A new
conversation that shares only a prefix (a system prompt) with a slot's longer cache takes the
least recently used slot with those cells shared (`_share_prefix`), so it does not evict it.

Exactness: llama.cpp's CPU numerics depend on the shape of a batch (measured: logits differ
by up to 0.45 when a cached prefix is cut at an arbitrary token). Three things set a row's
rounding. The repacked weight kernels (ggml-cpu repack) multiply a batch's rows in blocks of
16 counted from row 0, then blocks of 4, then the leftover rows one by one: three paths that
round differently. Weights left unrepacked (Q6_K ones in a Q4_K_M file) are multiplied row by
row below 8 rows and in tiles from 8 rows on, which round differently again, so a prompt's
last piece under 8 rows gets a step of its own when the prompt runs alone (`plan_pieces`).
Flash attention takes a tiled path for batches of 64 rows or more, which
sums the cache in 64-cell tiles; below 64 rows it sums a row's cells one by one in buffer
order. Every other op treats each row on its own. So a prompt is evaluated in pieces that end
at fixed positions (`piece_end`: every 16 tokens up to 64, then every 64). A step carries
whole 16-token pieces, each starting at a multiple of 16 rows, then prompts' last pieces,
then one row per decoding sequence, under 64 rows in all (`plan_pieces`); a 64-token piece
takes a step alone, alternating with the others. Every row of a whole piece then takes the
kernel paths it takes in a fresh evaluation, and a slot's cache is reused up to such a
boundary of its earlier prompt. Attention is the remaining condition: a reused prefix is
bit-exact when the sequence's cells lie in the buffer as in a fresh context, as they do for a
context that holds one conversation (checked bit for bit on the 1.5B's logits, prefixes of 48,
64 and 128 tokens). When other sequences' cells interleave with it in the shared buffer, a
reused prefix rounds differently from a fresh context (measured: up to 0.49 in a logit with
128 tokens reused), as decode steps that share batches do; the answer stays the model's up to
such near-ties; the same goes for a first token whose prompt's last piece shared its step
with other requests' rows (7 of 8 concurrent answers equalled their solo runs in the
server test).
Short pieces first let a shared system prompt of 16-63 tokens be reused; long
prompts still go 64 rows at a time, where tiled attention is fast (32-row pieces made a
1,000-token prompt 1.8x slower). Several prompts' pieces share a step with the decodes, so a
burst of requests starts sooner (prompt rows cost about the same per row from 16 rows up).
"""

from __future__ import annotations

import ctypes
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import llama_cpp
import numpy as np

from backends.base import ErrorEvent, Event, FinishReason
from backends.job import BaseJob
from backends.llamacpp.speculative import DraftModel, common_prefix, logits_row
from backends.speculation.cost import DraftCost, StepTimes
from backends.speculation.policy import Speculation

SMALL_PIECE, PIECE = 16, 64  # prompt evaluation pieces: 16 rows below position 64, then 64
MIXED_ROWS = PIECE - 1  # rows in a step that mixes pieces: below flash attention's tiled path
TILED_ROWS = 8  # from 8 rows on, ggml-cpu multiplies unrepacked K-quant weights in tiles


def piece_end(pos: int, length: int) -> int:
    """Where the prompt piece that starts at `pos` ends (a fixed boundary, or the prompt's end).
    16 is the row block of llama.cpp's repacked x86 kernels; 64 rows are where flash attention
    turns tiled (fast on long prompts)."""
    step = SMALL_PIECE if pos < PIECE else PIECE
    return min((pos // step + 1) * step, length)


def boundary_floor(n: int) -> int:
    """The last piece boundary at or before `n`: how much of a cached prompt can be reused."""
    return n // SMALL_PIECE * SMALL_PIECE if n < PIECE else n // PIECE * PIECE


def is_long_piece(job: Job) -> bool:
    """Whether the job's next prompt piece is a whole 64-token one (it takes a step alone)."""
    return job.pos >= PIECE and piece_end(job.pos, len(job.prompt)) - job.pos == PIECE


def plan_pieces(prefilling: list[Slot], room: int,
                alone: bool = False) -> list[tuple[Slot, int, int]]:
    """Prompt pieces (slot, start, end) for one step with `room` rows, oldest request first,
    in batch order: whole 16-token pieces first, so each starts at a multiple of 16 rows and
    takes the same kernel paths as alone; then the prompts' last, shorter pieces, cut to fit
    (no reuse reaches past the last boundary, so their rows need no fixed shape). 64-token
    pieces are never among them (`is_long_piece`). `alone`: one prompt and nothing else in
    the step, and its first token must not depend on how much of the prompt was cached: a
    last piece under TILED_ROWS rows then waits for a step of its own, as on a cache hit."""
    whole: list[tuple[Slot, int, int]] = []
    after: dict[int, int] = {}  # seq id -> prompt position after its whole pieces
    used = 0
    for slot in prefilling:
        job = slot.job
        pos = job.pos
        while pos < PIECE and used + SMALL_PIECE <= room:
            end = piece_end(pos, len(job.prompt))
            if end - pos < SMALL_PIECE:
                break
            whole.append((slot, pos, end))
            used, pos = used + SMALL_PIECE, end
        after[slot.seq_id] = pos
    last: list[tuple[Slot, int, int]] = []
    for slot in prefilling:
        n, pos = len(slot.job.prompt), after[slot.seq_id]
        end = piece_end(pos, n)
        full = SMALL_PIECE if pos < PIECE else PIECE
        if alone and whole and end - pos < TILED_ROWS:
            continue
        if pos < n and end == n and end - pos < full and used < room:
            take = min(end - pos, room - used)
            last.append((slot, pos, pos + take))
            used += take
    return whole + last


@dataclass
class Job(BaseJob):
    """A request in the engine (backends.job.BaseJob) and its decoding state."""
    prompt: list[int]
    sampler: Any  # llama_cpp._internals.LlamaSampler
    max_new: int
    pos: int = 0  # prompt tokens already in the KV cache
    reused: int = 0
    next_token: int | None = None  # sampled, not yet in the KV cache
    n_out: int = 0
    spec: Speculation | None = None  # speculative decoding (backends.speculation)
    draft: DraftModel | None = None  # its draft model, if it has one
    propose_s: float = 0.0  # this step's share of the draft model's proposing time
    stored_logits: np.ndarray | None = None  # the whole prompt was cached with its logits


@dataclass
class Slot:
    seq_id: int
    tokens: list[int] = field(default_factory=list)  # what this sequence's cache holds
    exact_upto: int = 0  # leading cached tokens bit-identical to a fresh evaluation
    # the logits after tokens[:logits_at], its last prompt: the same prompt again needs no
    # evaluation at all (a regenerated answer, a retried request)
    logits: np.ndarray | None = None
    logits_at: int = 0
    job: Job | None = None
    last_used: float = 0.0


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
        model = llama_cpp.llama_get_model(ctx.ctx)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
        self._sliding = llama_cpp.llama_model_n_swa(model) > 0  # cannot share a prefix
        self._prefill_turn = True  # alternate prompt pieces and decode steps
        self.times = StepTimes()  # decode time by batch rows, for speculation's choices

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
                if slot.logits_at == len(prompt) and slot.tokens[:len(prompt)] == prompt:
                    return len(prompt)  # with the logits its evaluation ended on
                n = min(common_prefix(slot.tokens, prompt), len(prompt) - 1, slot.exact_upto)
                return boundary_floor(n)

            slot = max(free, key=lambda s: (reusable(s), -s.last_used))
            keep = reusable(slot)
            if 0 < keep < min(len(slot.tokens), len(job.prompt)):
                slot = self._share_prefix(slot, keep, free)
            if keep < len(slot.tokens) and not (
                    keep > 0 and llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id,
                                                               keep, -1)):
                # sliding-window caches cannot drop a suffix: start the sequence over
                llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, -1, -1)
                keep = 0
            slot.tokens = slot.tokens[:keep]
            slot.exact_upto = min(slot.exact_upto, keep)
            if keep == len(job.prompt) == slot.logits_at:
                job.stored_logits = slot.logits
            elif keep < slot.logits_at:
                slot.logits, slot.logits_at = None, 0
            slot.job = job
            job.pos = job.reused = keep
            job.max_new = min(job.max_new, self.n_ctx_seq - len(job.prompt))

    def _share_prefix(self, donor: Slot, keep: int, free: list[Slot]) -> Slot:
        """Give the least recently used free slot the `keep` tokens it shares with `donor`
        (a system prompt, say) instead of cutting the donor's longer cache: in the one KV
        buffer the cells then belong to both sequences (llama_memory_seq_cp copies nothing),
        and the donor keeps its conversation for that conversation's next turn."""
        spare = min(free, key=lambda s: s.last_used)
        if spare is donor or self._sliding:
            return donor
        llama_cpp.llama_memory_seq_rm(self._memory, spare.seq_id, -1, -1)
        llama_cpp.llama_memory_seq_cp(self._memory, donor.seq_id, spare.seq_id, 0, keep)
        spare.tokens, spare.exact_upto = donor.tokens[:keep], min(donor.exact_upto, keep)
        spare.logits, spare.logits_at = None, 0
        return spare

    def fail_all(self, message: str) -> list[tuple[str, Event]]:
        """End every request with an error (after a failed decode) and clear the caches."""
        jobs = [s.job for s in self.slots if s.job is not None] + list(self.waiting)
        self.waiting.clear()
        for slot in self.slots:
            slot.job, slot.tokens, slot.exact_upto = None, [], 0
            slot.logits, slot.logits_at = None, 0
        llama_cpp.llama_memory_clear(self._memory, True)
        return [(job.stream_id, ErrorEvent(message)) for job in jobs]

    # -- one step --------------------------------------------------------------------------
    def step(self) -> list[tuple[str, Event]]:
        """Decode one batch; return the events it produced, per stream."""
        self._assign()
        out: list[tuple[str, Event]] = []
        running = [s for s in self.slots if s.job is not None]
        for slot in running:
            if slot.job.is_cancelled():
                out += self._finish(slot, "cancelled")
            elif slot.job.stored_logits is not None:  # a prompt seen whole before
                logits, slot.job.stored_logits = slot.job.stored_logits, None
                out += self._accept(slot, self._sample_from(slot.job.sampler, logits))
        running = [s for s in self.slots if s.job is not None]
        if not running:
            return out

        self.batch.reset()
        b = self.batch.batch
        # slot, first row, tokens, prefill, proposed tokens (speculative decoding)
        rows: list[tuple[Slot, int, list[int], bool, list[int]]] = []

        def add(slot: Slot, tokens: list[int], first_pos: int, logits_from: int,
                proposal: list[int] = ()) -> None:
            start = b.n_tokens
            for i, tok in enumerate(tokens):
                j = start + i
                b.token[j], b.pos[j] = tok, first_pos + i
                b.seq_id[j][0], b.n_seq_id[j] = slot.seq_id, 1
                b.logits[j] = i >= logits_from
            b.n_tokens = start + len(tokens)
            rows.append((slot, start, tokens, first_pos < len(slot.job.prompt), list(proposal)))

        decoding = [s for s in running if s.job.next_token is not None][: self.n_batch]
        prefilling = sorted((s for s in running
                             if s.job.next_token is None and s.job.pos < len(s.job.prompt)),
                            key=lambda s: s.job.started)  # oldest request first
        long = [s for s in prefilling if is_long_piece(s.job)]
        short = [s for s in prefilling if not is_long_piece(s.job)]
        room = min(MIXED_ROWS, self.n_batch) - len(decoding)
        pieces = plan_pieces(short, room, alone=len(running) == 1) if room > 0 else []
        turn = self._prefill_turn  # a 64-token piece alternates with the other steps
        self._prefill_turn = not self._prefill_turn
        if long and (turn or not (pieces or decoding)):
            # a 64-token piece takes a step alone: at 64 rows attention is tiled, and
            # rows sharing its step would change its rounding
            pieces, decoding = [(long[0], long[0].job.pos, long[0].job.pos + PIECE)], []
        elif not pieces and short and (turn or not decoding):
            # too many decodes to leave room: a step of prompt pieces alone
            pieces, decoding = plan_pieces(short, min(MIXED_ROWS, self.n_batch)), []
        # prompt pieces first (see plan_pieces), then one row per decoding sequence (with
        # its speculative proposal when no prompt shares the step)
        for slot, start, end in pieces:
            prompt = slot.job.prompt
            add(slot, prompt[start:end], start, end - start - 1 if end == len(prompt)
                else end - start)
        proposals = self._proposals(decoding) if not pieces else {}
        for slot in decoding:
            proposal = proposals.get(slot.seq_id, [])
            add(slot, [slot.job.next_token, *proposal], len(slot.tokens), 0, proposal)
        is_decode = not pieces
        started = time.perf_counter()
        self.ctx.decode(self.batch)
        step_s = time.perf_counter() - started
        if is_decode:
            self.times.record(b.n_tokens, step_s)

        for slot, start, tokens, prefill, proposal in rows:
            job = slot.job
            base = len(slot.tokens)
            slot.tokens += tokens
            if prefill:
                job.pos += len(tokens)
                if job.pos < len(job.prompt):
                    continue
                # a last piece shorter than its full size took other paths than a longer
                # prompt's piece would: reuse stops at the boundary before it
                slot.exact_upto = boundary_floor(len(job.prompt))
                slot.logits = self._logits(start + len(tokens) - 1)
                slot.logits_at = len(job.prompt)
            else:
                job.next_token = None
            if not proposal:
                token = job.sampler.sample(self.ctx, start + len(tokens) - 1)
                if job.spec is not None:
                    job.spec.decoded_plainly(token)
                out += self._accept(slot, token)
            else:
                out += self._verify(slot, start, base, proposal, step_s)
        return out

    def _proposals(self, decoding: list[Slot]) -> dict[int, list[int]]:
        """The tokens each speculating sequence proposes this step (by seq id), as many as
        its cost model says pay off (Speculation.choose)."""
        out: dict[int, list[int]] = {}
        drafts: dict[int, list[tuple[Slot, int, list[int]]]] = {}  # slot, k, its tokens
        spare = self.n_batch - len(decoding)
        for slot in decoding:
            job = slot.job
            if job.spec is None or spare <= 0:
                continue
            limit = min(job.max_new - job.n_out - 1, self.n_ctx_seq - 1 - len(slot.tokens),
                        spare)
            job.spec.remaining = job.max_new - job.n_out
            history = slot.tokens + [job.next_token] if job.draft is not None else []
            cost = (DraftCost(job.draft.round_s, job.draft.behind(slot.seq_id, history),
                              job.draft.prefill_s) if job.draft is not None else None)
            rows = self.n_batch - spare  # the decodes, and proposals chosen before this one
            k = job.spec.choose(limit, self.times, len(decoding), rows, cost)
            if k <= 0:
                continue
            if job.spec.lookup is not None:
                proposal = job.spec.lookup.propose(k)
                if proposal:
                    out[slot.seq_id] = proposal
                    spare -= len(proposal)
            else:
                drafts.setdefault(id(job.draft), []).append((slot, k, history))
                spare -= k
        for wants in drafts.values():
            draft = wants[0][0].job.draft
            started = time.perf_counter()
            made = draft.propose([(slot.seq_id, history, k) for slot, k, history in wants])
            share = (time.perf_counter() - started) / len(wants)
            for (slot, _, _), proposal in zip(wants, made, strict=True):
                out[slot.seq_id] = proposal
                slot.job.propose_s = share
        for slot in decoding:
            if slot.seq_id in out:
                slot.job.spec.proposed += len(out[slot.seq_id])
        return out

    def _verify(self, slot: Slot, start: int, base: int, proposal: list[int],
                step_s: float) -> list[tuple[str, Event]]:
        """Sample at each proposed position with the request's own sampler while the samples
        equal the proposal; the first sample that differs (or the one after the last
        proposed token) is the next token. Rejected tokens leave the KV cache."""
        job = slot.job
        spec = job.spec
        out: list[tuple[str, Event]] = []
        matched = 0
        for i in range(len(proposal) + 1):
            token = job.sampler.sample(self.ctx, start + i)
            hit = i < len(proposal) and token == proposal[i]
            if hit:
                matched += 1
                spec.accepted += 1
            out += self._accept(slot, token)
            if slot.job is None or not hit:
                break
            job.next_token = None  # it is in the cache already
        spec.observe(len(proposal), matched)
        spec.realize(matched + 1, job.propose_s + step_s)
        job.propose_s = 0.0
        keep = base + 1 + matched
        if keep < len(slot.tokens):
            if not llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, keep, -1):
                raise RuntimeError("llama.cpp could not drop rejected speculative tokens")
            slot.tokens = slot.tokens[:keep]
        return out

    def _logits(self, row: int) -> np.ndarray:
        return logits_row(self.ctx.ctx, row, self.n_vocab).copy()

    def _sample_from(self, sampler: Any, logits: np.ndarray) -> int:
        """What `sampler.sample(ctx, row)` does (llama_sampler_sample), on stored logits."""
        data = (llama_cpp.llama_token_data * self.n_vocab)()
        view = np.ctypeslib.as_array(data)
        view["id"], view["logit"], view["p"] = np.arange(self.n_vocab), logits, 0.0
        candidates = llama_cpp.llama_token_data_array(
            data=data, size=self.n_vocab, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(sampler.sampler, ctypes.byref(candidates))
        token = data[candidates.selected].id
        llama_cpp.llama_sampler_accept(sampler.sampler, token)
        return token

    def _accept(self, slot: Slot, token: int) -> list[tuple[str, Event]]:
        job = slot.job
        if self.is_eog(token):
            return self._finish(slot, "stop")
        job.n_out += 1
        if job.spec is not None and job.spec.lookup is not None:
            job.spec.lookup.extend([token])
        events = job.emitted(self.detokenize(token))
        if job.text.stopped:
            return events + self._finish(slot, "stop")
        if job.n_out >= job.max_new:
            return events + self._finish(slot, "length")
        job.next_token = token
        return events

    def _finish(self, slot: Slot, reason: FinishReason) -> list[tuple[str, Event]]:
        job = slot.job
        slot.job = None
        slot.last_used = time.monotonic()
        return job.finish(reason, prompt_tokens=len(job.prompt), completion_tokens=job.n_out,
                          cached_tokens=job.reused,
                          draft_tokens=job.spec.proposed if job.spec else 0,
                          accepted_tokens=job.spec.accepted if job.spec else 0)
