"""Many sequences in one llama.cpp context: the llama.cpp backend's continuous batching.

Each step decodes every running sequence's next token beside as much of the waiting prompts
as the batch holds, each sequence with its own sampler chain; a slot keeps its KV cache and
last logits for the next turn, a retry or a shared system prompt. A new prompt reuses the
longest common prefix a slot holds, as llama-server does, and the same prompt again
evaluates nothing. Which slot a prompt takes (`reusable`, `place`) and how prompts share a
step (`plan_prompt_rows`) are pure functions, tested without a model. The rules and the
measurements behind them: docs/notes/llamacpp-engine.md.
"""

from __future__ import annotations

import ctypes
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import llama_cpp
import numpy as np

from backends.base import ErrorEvent, Event, FinishReason, TokenLogprob
from backends.grammar import Constraint
from backends.job import BaseJob
from backends.llamacpp.kv_store import MIN_TOKENS, KvStore
from backends.llamacpp.speculative import DraftModel, common_prefix, logits_row
from backends.llamacpp.vision import MediaSpan, Projector
from backends.logprobs import token_logprob
from backends.speculation.cost import DraftCost, StepTimes
from backends.speculation.policy import Speculation

# A verified greedy position whose top two logits are closer than this is sampled again from
# a one-row step: a verification batch rounds differently from the one-row step plain decoding
# takes, and a near-tie could go the other way (measured: docs/notes/llamacpp-engine.md).
# EMBER_NEAR_TIE sets another margin, for measuring (0 turns the re-check off).
NEAR_TIE = float(os.environ.get("EMBER_NEAR_TIE", "1.0"))

log = logging.getLogger(__name__)

# How long saving the caches at unload may take: the worker's parent kills a worker that has
# not stopped 5 s after it was asked to (app/runtime/worker_handle.py).
SAVE_BUDGET_S = 3.0


# A conversation keeps its cache when a new request shares only its prefix (a system prompt)
# if it holds at least this many tokens past that prefix: the new request then takes a copy
# of the prefix in another slot, and llama.cpp copies whole KV streams (0.1-0.2 s for a 16k
# context), which a short tail is not worth.
KEEP_TAIL = 64

# The most host memory a swap of two caches may take (both copies): 1 GiB is about 87k
# tokens of the 0.5B's f16 cache, 8k of an 8B's. Larger caches move by a stream copy, and
# the one they displace is kept only if `shelter` finds a slot for it.
SWAP_MAX_BYTES = 1 << 30


# A waiting prompt that shares at least this many more tokens with a prompt being evaluated
# than any free slot's cache serves it waits until that evaluation has passed them, and then
# takes a copy: two requests with one long prefix, sent at once (Claude Code sends two 12k
# ones on start), evaluate it once instead of side by side at half speed each.
SHARE_IN_FLIGHT_MIN = 256


def in_flight_prefix(running: list[Slot], prompt: list[int], reuse: int
                     ) -> tuple[Slot | None, int]:
    """The running slot whose prompt shares the longest prefix with `prompt` and that
    prefix's length (short of the prompt's last token, whose logits the new request needs),
    when it is worth waiting for: longer than `reuse`, what a free slot's cache serves the
    prompt, by SHARE_IN_FLIGHT_MIN tokens. (None, 0) otherwise."""
    best, shared = None, 0
    for slot in running:
        if slot.job is None:
            continue
        n = min(common_prefix(slot.job.prompt, prompt), len(prompt) - 1)
        if n > shared:
            best, shared = slot, n
    if best is None or shared < reuse + SHARE_IN_FLIGHT_MIN:
        return None, 0
    return best, shared


def plan_prompt_rows(prefilling: list[Slot], room: int) -> list[tuple[Slot, int, int]]:
    """Prompt pieces (slot, start, end) for one step with `room` rows: the oldest request
    first, each prompt taking as much of the room as it still needs (llama-server fills its
    batches the same way). One large batch evaluates a prompt fastest (measured in
    docs/notes/llamacpp-engine.md)."""
    pieces: list[tuple[Slot, int, int]] = []
    for slot in prefilling:
        if room <= 0:
            break
        job = slot.running
        end = min(job.prefill_end(), job.pos + room)
        if end <= job.pos:
            continue  # at an image: the engine decodes it on its own first
        pieces.append((slot, job.pos, end))
        room -= end - job.pos
    return pieces


def reusable(slot: Slot, prompt: list[int]) -> int:
    """How many of `prompt`'s first tokens `slot`'s cache serves: the whole prompt when it is
    the slot's last one, whose logits the slot kept; otherwise the common prefix short of the
    prompt's last token (whose logits the answer starts from), as llama-server reuses it."""
    if slot.logits_at == len(prompt) and slot.tokens[:len(prompt)] == prompt:
        return len(prompt)  # with the logits its evaluation ended on
    return max(0, min(common_prefix(slot.tokens, prompt), len(prompt) - 1))


def whole_spans(keep: int, spans: Sequence[MediaSpan]) -> int:
    """`keep` cached tokens of a prompt, moved back to the start of a media span it would
    cut: an image is in a cache whole or not at all (its pseudo-tokens cannot be evaluated
    as text)."""
    return next((s.start for s in spans if s.start < keep < s.end), keep)


@dataclass(frozen=True)
class Placement:
    """Where a new request goes: `slot`, reusing the first `keep` tokens of its cache. With a
    `donor`, the slot first takes those `keep` cells from the donor's cache: a prefix another
    conversation shares, or (`moved`) the request's own cache moving next to the running
    sequences."""
    slot: Slot
    keep: int
    donor: Slot | None = None
    moved: bool = False


def runs(seq_ids: AbstractSet[int]) -> int:
    """How many runs of consecutive ids `seq_ids` make: the passes over the weights a decode
    step of those sequences takes (llama.cpp splits a batch of separate KV streams at every
    gap, `llama_batch_allocr::split_equal`)."""
    return sum(1 for i in seq_ids if i - 1 not in seq_ids)


def wanted_slots(free: list[Slot], prompts: list[list[int]]) -> frozenset[int]:
    """The seq ids of the free slots whose caches `prompts` (other waiting requests) would
    reuse, each prompt its best slot: placing a request must not overwrite them."""
    wanted = set()
    for prompt in prompts:
        # the slot place() would pick for it: the first one on a tie
        reuse, _, _, seq_id = max((reusable(s, prompt), -s.last_used, -i, s.seq_id)
                                  for i, s in enumerate(free))
        if reuse > 0:
            wanted.add(seq_id)
    return frozenset(wanted)


def covered_slots(free: list[Slot], slots: list[Slot]) -> frozenset[int]:
    """The seq ids of the free slots whose caches lose nothing if overwritten: empty, or a
    prefix of what another slot holds (a conversation moved on, with a copy, elsewhere)."""
    return frozenset(s.seq_id for s in free if not s.tokens or any(
        o is not s and o.tokens[:len(s.tokens)] == s.tokens for o in slots))


def others_first(slot: Slot, cache_key: str | None) -> bool:
    """Sorts a slot after the ones to overwrite first: a request with a cache key (OpenAI's
    prompt_cache_key, Anthropic's metadata.user_id) overwrites caches of its own key before
    other clients' (an agent's own older conversation goes before another agent's)."""
    return cache_key is None or slot.cache_key != cache_key


def place(free: list[Slot], prompt: list[int], can_share: bool = True,
          busy: frozenset[int] = frozenset(), wanted: frozenset[int] = frozenset(),
          covered: frozenset[int] = frozenset(), cache_key: str | None = None) -> Placement:
    """The free slot for a new request: the one whose cache serves the most of `prompt`, the
    least recently used on a tie (so the cache evicted is the one idle longest). When that
    reuse is only a prefix of the slot's longer cache (a system prompt another conversation
    shares), the least recently used free slot takes a copy of those cells instead, and the
    conversation keeps its cache for its next turn, if it is longer than the prefix by
    KEEP_TAIL tokens (`can_share`: caches that can be copied, which sliding-window ones
    cannot). A prompt that holds the slot's whole cache is that
    conversation's next turn, so it stays in its slot, unless other sequences are decoding
    (`busy`, their seq ids) and another free slot would keep them all in fewer runs of
    consecutive ids (`runs`): the request then takes that slot, with a copy of its cells.
    Neither move overwrites a cache another waiting request reuses (`wanted`, seq ids): in a
    burst of returning conversations each finds its own cache, and once all run their ids
    are consecutive anyway. Among the slots a move, or a prompt that reuses nothing, may
    take, those whose caches another slot also holds go first (`covered`), then those of
    the request's own `cache_key` (`others_first`), then the least recently used. (A cache
    that must still be overwritten can be kept elsewhere first: `shelter`.)"""
    slot = max(free, key=lambda s: (reusable(s, prompt), -s.last_used))
    keep = reusable(slot, prompt)
    if keep == 0:  # nothing to reuse: overwrite what loses least, as a move does
        slot = min(free, key=lambda s: overwrite_order(s, wanted, covered, cache_key))
    target = slot
    spare = [s for s in free if s is slot or s.seq_id not in wanted]
    branches_off = common_prefix(slot.tokens, prompt) < len(slot.tokens)
    if can_share and 0 < keep < len(prompt) and branches_off and (
            len(slot.tokens) - keep >= KEEP_TAIL):
        target = min(spare, key=lambda s: (others_first(s, cache_key), s.last_used))
    moved = False
    if busy and (can_share or keep == 0):
        fewest = min(runs(busy | {s.seq_id}) for s in spare)
        if runs(busy | {target.seq_id}) > fewest:
            target = min((s for s in spare if runs(busy | {s.seq_id}) == fewest),
                         key=lambda s: (s.seq_id not in covered, s.last_used))
            moved = target is not slot
    if target is not slot and keep > 0:
        return Placement(target, keep, donor=slot, moved=moved)
    return Placement(target, keep)


def overwrite_order(slot: Slot, wanted: frozenset[int], covered: frozenset[int],
                    cache_key: str | None) -> tuple[bool, bool, bool, float]:
    """Sorts the free slots a prompt that reuses nothing may overwrite, least loss first."""
    return (slot.seq_id in wanted, slot.seq_id not in covered,
            others_first(slot, cache_key), slot.last_used)


def displaces(placement: Placement, covered: frozenset[int]) -> bool:
    """Whether the placement's copy overwrites a cache no other slot holds."""
    target = placement.slot
    return placement.donor is not None and bool(target.tokens) and \
        target.seq_id not in covered


def shelter(free: list[Slot], placement: Placement, covered: frozenset[int],
            wanted: frozenset[int] = frozenset()) -> Slot | None:
    """Where the cache a placement overwrites can go first, so its conversation keeps it: a
    free slot that loses nothing (`covered`: empty, or a copy of another cache), not the
    placement's own slots and not one a waiting request reuses (`wanted`); empty ones
    first, then the least recently used. None when the placement overwrites nothing of
    value or no such slot is free. For a prefix shared with another conversation, and for
    a move whose caches are too large to swap (`BatchEngine._swap`): two stream copies,
    milliseconds, against evaluating that conversation's prompt again when it returns."""
    if not displaces(placement, covered):
        return None
    target = placement.slot
    room = [s for s in free if s is not target and s is not placement.donor
            and s.seq_id in covered and s.seq_id not in wanted]
    return min(room, key=lambda s: (bool(s.tokens), s.last_used), default=None)


@dataclass
class Job(BaseJob):
    """A request in the engine (backends.job.BaseJob) and its decoding state."""
    prompt: list[int]
    sampler: Any  # llama_cpp._internals.LlamaSampler
    max_new: int
    pos: int = 0  # prompt tokens already in the KV cache
    reused: int = 0
    disk: int = 0  # of `reused`, the tokens whose cells were restored from disk (kv_store)
    next_token: int | None = None  # sampled, not yet in the KV cache
    n_out: int = 0
    spec: Speculation | None = None  # speculative decoding (backends.speculation)
    draft: DraftModel | None = None  # its draft model, if it has one
    propose_s: float = 0.0  # this step's share of the draft model's proposing time
    stored_logits: np.ndarray | None = None  # the whole prompt was cached with its logits
    grammar: Constraint | None = None  # constrained decoding (backends.grammar)
    argmax: bool = False  # greedy without penalties: the sampler chain would pick the argmax
    logprob: TokenLogprob | None = None  # the sampled token's, until _accept streams it
    # the prompt's images and audio, as runs of pseudo-tokens in `prompt` (vision.py)
    spans: tuple[MediaSpan, ...] = ()
    release: Callable[[], None] | None = None  # frees the spans' chunks when the job ends

    def prefill_end(self) -> int:
        """Where this step's prompt rows must stop: the next media span's start (which is
        decoded on its own), else the prompt's end."""
        return next((s.start for s in self.spans if s.start >= self.pos), len(self.prompt))

    def span_at(self, index: int) -> MediaSpan | None:
        return next((s for s in self.spans if s.start == index), None)


@dataclass(frozen=True)
class Recheck:
    """A verified position to sample again from a one-row step (see NEAR_TIE): the row of
    the token the slot holds at `pos`, the `index`-th of the step's rows for this sequence."""
    slot: Slot
    pos: int
    index: int
    proposal: list[int]
    matched: int
    step_s: float


@dataclass
class Slot:
    seq_id: int
    tokens: list[int] = field(default_factory=list)  # what this sequence's cache holds
    # the logits after tokens[:logits_at], its last prompt: the same prompt again needs no
    # evaluation at all (a regenerated answer, a retried request)
    logits: np.ndarray | None = None
    logits_at: int = 0
    job: Job | None = None
    last_used: float = 0.0
    cache_key: str | None = None  # the cache_key of the request that last ran here
    disk: int = 0  # the first tokens' cells, restored from disk, that no request used yet
    # (end index, positions short of tokens) of each media span in `tokens` whose KV
    # positions advance by fewer than its tokens (M-RoPE images): what follows sits that much
    # lower in the cache than its index
    shifts: list[tuple[int, int]] = field(default_factory=list)

    def kv_pos(self, index: int) -> int:
        """The KV position of tokens[index] (its index, less the shifts of the spans before
        it)."""
        return index - sum(d for end, d in self.shifts if end <= index)

    def cut(self, keep: int) -> None:
        """Keep the first `keep` tokens' record (the cache's cells are dropped by the
        caller)."""
        self.tokens = self.tokens[:keep]
        self.shifts = [(end, d) for end, d in self.shifts if end <= keep]
        self.disk = min(self.disk, keep)

    @property
    def running(self) -> Job:
        """The job of a slot the engine is stepping (one taken from a running list)."""
        if self.job is None:
            raise RuntimeError(f"slot {self.seq_id} has no request")
        return self.job


class BatchEngine:
    def __init__(self, ctx: Any, n_seq: int, n_ctx_seq: int, n_batch: int,
                 detokenize: Callable[[int], bytes], is_eog: Callable[[int], bool],
                 token_bytes: Callable[[int], bytes] | None = None,
                 projector: Projector | None = None) -> None:
        from llama_cpp._internals import LlamaBatch

        self.ctx, self.n_ctx_seq, self.n_batch = ctx, n_ctx_seq, n_batch
        self.detokenize, self.is_eog = detokenize, is_eog
        # a token as logprobs show it (control tokens too): the answer's text hides them
        self.token_bytes = token_bytes or detokenize
        self.slots = [Slot(i) for i in range(n_seq)]
        self.waiting: deque[Job] = deque()
        self.batch = LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=n_seq, verbose=False)
        self.one_row = LlamaBatch(n_tokens=1, embd=0, n_seq_max=1, verbose=False)
        self._memory = llama_cpp.llama_get_memory(ctx.ctx)
        model = llama_cpp.llama_get_model(ctx.ctx)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
        self._sliding = llama_cpp.llama_model_n_swa(model) > 0  # cannot share a prefix
        self._copying: set[int] = set()  # seq ids in a stream copy until the next decode
        self.times = StepTimes()  # decode time by batch rows, for speculation's choices
        self.projector = projector  # the model's images and audio (vision.py), if any
        # saved caches on disk (kv_store.py), if the load plan names a folder for them;
        # not for sliding-window caches, which cannot drop a restored cache's tail
        self.kv_store: KvStore | None = None

    def close(self) -> None:
        self.batch.close()
        self.one_row.close()

    # -- requests --------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        self.waiting.append(job)

    def has_work(self) -> bool:
        return bool(self.waiting) or any(s.job for s in self.slots)

    def _assign(self) -> None:
        later: list[Job] = []  # waiting for a running prompt's evaluation to pass their prefix
        try:
            self._assign_waiting(later)
        finally:
            self.waiting.extendleft(reversed(later))

    def _assign_waiting(self, later: list[Job]) -> None:
        while self.waiting:
            free = [s for s in self.slots if s.job is None]
            if not free:
                return
            job = self.waiting.popleft()
            running = [s for s in self.slots if s.job is not None]
            busy = frozenset(s.seq_id for s in running)
            wanted = wanted_slots(free, [j.prompt for j in self.waiting])
            covered = covered_slots(free, self.slots)
            flight, shared = (None, 0) if self._sliding else in_flight_prefix(
                running, job.prompt, max(reusable(s, job.prompt) for s in free))
            if flight is not None:
                if len(flight.tokens) < shared:
                    later.append(job)  # its prefix is being evaluated: wait, then copy it
                    continue
                # the prefix is in a running sequence's cache: a copy of it, into the slot
                # whose cache loses least (as for a prompt that reuses nothing)
                slot = min(free, key=lambda s: overwrite_order(s, wanted, covered,
                                                               job.request.cache_key))
                self._share_prefix(flight, slot, shared)
                self._start(slot, job, shared)
                continue
            self._from_disk(job, free, wanted, covered)
            placement = place(free, job.prompt, can_share=not self._sliding, busy=busy,
                              wanted=wanted, covered=covered, cache_key=job.request.cache_key)
            slot, keep = placement.slot, placement.keep
            donor = placement.donor
            if placement.moved and donor is not None and displaces(placement, covered) and \
                    self._swap(donor, slot):
                # a request moving next to the running sequences with its cache: its old
                # slot would keep a copy of that, so the cache it displaces goes there
                # instead (a retried prompt's old answer past `keep` is what is given up)
                donor = None
                if len(slot.tokens) < keep:  # llama.cpp refused: both start over
                    keep = 0
            elif (keeper := shelter(free, placement, covered, wanted)) is not None:
                self._share_prefix(slot, keeper, len(slot.tokens))
                keeper.last_used, keeper.cache_key = slot.last_used, slot.cache_key
            if donor is not None:
                self._share_prefix(donor, slot, keep)
            self._start(slot, job, keep)

    def _start(self, slot: Slot, job: Job, keep: int) -> None:
        """Run `job` in `slot`, reusing the first `keep` tokens of its cache."""
        keep = whole_spans(keep, job.spans)
        if keep < len(slot.tokens) and not (
                keep > 0 and llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id,
                                                           slot.kv_pos(keep), -1)):
            # sliding-window caches cannot drop a suffix: start the sequence over
            llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, -1, -1)
            keep = 0
        slot.cut(keep)
        if keep == len(job.prompt) == slot.logits_at:
            job.stored_logits = slot.logits
        elif keep < slot.logits_at:
            slot.logits, slot.logits_at = None, 0
        slot.job = job
        slot.cache_key = job.request.cache_key
        job.pos = job.reused = keep
        job.disk, slot.disk = min(slot.disk, keep), 0
        job.max_new = min(job.max_new, self.n_ctx_seq - len(job.prompt))

    def _share_prefix(self, donor: Slot, spare: Slot, keep: int) -> None:
        """Give `spare` the first `keep` tokens of `donor`'s cache (a system prompt, or a
        conversation moving next to the running ones; see `place`), and the donor keeps its
        own. Each sequence has its own KV stream, so llama.cpp copies the donor's whole
        stream (at the next decode; tens of milliseconds for a 4k context), and the spare
        drops what follows the prefix."""
        llama_cpp.llama_memory_seq_rm(self._memory, spare.seq_id, -1, -1)
        llama_cpp.llama_memory_seq_cp(self._memory, donor.seq_id, spare.seq_id, -1, -1)
        llama_cpp.llama_memory_seq_rm(self._memory, spare.seq_id, donor.kv_pos(keep), -1)
        self._copying |= {donor.seq_id, spare.seq_id}
        spare.tokens = donor.tokens[:keep]
        spare.shifts = [(end, d) for end, d in donor.shifts if end <= keep]
        spare.disk = min(donor.disk, keep)
        spare.logits, spare.logits_at = ((donor.logits, donor.logits_at)
                                         if 0 < donor.logits_at <= keep else (None, 0))

    def _swap(self, a: Slot, b: Slot) -> bool:
        """Exchange the caches of two free slots, so a move next to the running sequences
        displaces no conversation's only cache (`place`; tried before `shelter`).
        Through host memory (llama_state_seq_get/set_data: only the cells in use, about
        12 KB a token for the 0.5B), at once, unlike a stream copy, which llama.cpp makes
        at the next decode: so not while one of the two is in such a copy. False when it
        cannot be done; if llama.cpp refuses the second half, both slots start over."""
        if {a.seq_id, b.seq_id} & self._copying:
            return False
        ctx = self.ctx.ctx
        sizes = [llama_cpp.llama_state_seq_get_size(ctx, s.seq_id) for s in (a, b)]
        if 0 in sizes or sum(sizes) > SWAP_MAX_BYTES:
            return False
        saved = []
        for slot, size in zip((a, b), sizes, strict=True):
            data = (ctypes.c_uint8 * size)()
            if llama_cpp.llama_state_seq_get_data(ctx, data, size, slot.seq_id) != size:
                return False
            saved.append((data, size))
        for slot, (data, size) in zip((b, a), saved, strict=True):
            llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, -1, -1)
            if llama_cpp.llama_state_seq_set_data(ctx, data, size, slot.seq_id) != size:
                for s in (a, b):
                    llama_cpp.llama_memory_seq_rm(self._memory, s.seq_id, -1, -1)
                    s.tokens, s.logits, s.logits_at, s.shifts, s.disk = [], None, 0, [], 0
                return True  # nothing is cached in either now: no copy to make
        a.tokens, b.tokens = b.tokens, a.tokens
        a.shifts, b.shifts = b.shifts, a.shifts
        a.logits, b.logits = b.logits, a.logits
        a.logits_at, b.logits_at = b.logits_at, a.logits_at
        a.last_used, b.last_used = b.last_used, a.last_used
        a.cache_key, b.cache_key = b.cache_key, a.cache_key
        a.disk, b.disk = b.disk, a.disk
        return True

    # -- saved caches (kv_store.py) ---------------------------------------------------------
    def save_states(self, budget_s: float = SAVE_BUDGET_S) -> int:
        """Write the slots' caches to the kv_store, most recently used first, while
        `budget_s` lasts; return how many were written. Skipped: caches under MIN_TOKENS,
        those with images (M-RoPE shifts, pseudo-tokens), those another slot holds more of
        (an old copy), those in a stream copy llama.cpp has not made yet, and those saved
        already (a restored conversation that did not move on)."""
        store = self.kv_store
        if store is None:
            return 0
        started, written = time.monotonic(), 0
        for slot in sorted(self.slots, key=lambda s: -s.last_used):
            tokens = slot.tokens
            if len(tokens) < MIN_TOKENS or slot.shifts or min(tokens) < 0 or \
                    slot.seq_id in self._copying or any(
                        len(o.tokens) > len(tokens) and o.tokens[:len(tokens)] == tokens
                        for o in self.slots):
                continue
            if store.holds(tokens) is not None:
                continue
            if time.monotonic() - started > budget_s:
                log.warning("saving KV caches took over %.1f s: the rest are not saved",
                            budget_s)
                break
            ctx = self.ctx.ctx
            size = llama_cpp.llama_state_seq_get_size(ctx, slot.seq_id)
            data = (ctypes.c_uint8 * size)()
            if size == 0 or llama_cpp.llama_state_seq_get_data(ctx, data, size,
                                                               slot.seq_id) != size:
                continue
            try:
                store.save(tokens, data)
            except OSError as e:
                log.warning("could not save a KV cache to %s: %s", store.folder, e)
                break
            written += 1
        return written

    def _from_disk(self, job: Job, free: list[Slot], wanted: frozenset[int],
                   covered: frozenset[int]) -> None:
        """Restore the saved cache (kv_store.py) sharing the longest prefix with `job`'s
        prompt, when it serves MIN_TOKENS more of it than any slot's cache does, into the
        free slot a prompt that reuses nothing would overwrite: `place` then picks that slot,
        which serves the most. The file's key, tokens and checksum are checked first, and the
        cells llama.cpp holds afterwards; a file that fails any check is dropped, never
        used, and the request goes on as it would have without it."""
        store = self.kv_store
        if store is None:
            return
        entry, shared = store.best(job.prompt)
        here = max(reusable(s, job.prompt) for s in self.slots)
        choices = [s for s in free if s.seq_id not in self._copying]
        if entry is None or shared < here + MIN_TOKENS or not choices:
            return
        started = time.perf_counter()
        payload = store.load(entry)
        if payload is None:
            return
        slot = min(choices, key=lambda s: overwrite_order(s, wanted, covered,
                                                          job.request.cache_key))
        ctx, size = self.ctx.ctx, len(payload)
        llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, -1, -1)
        slot.tokens, slot.shifts, slot.logits, slot.logits_at, slot.disk = [], [], None, 0, 0
        read = llama_cpp.llama_state_seq_set_data(
            ctx, (ctypes.c_uint8 * size).from_buffer(payload), size, slot.seq_id)
        cells = llama_cpp.llama_memory_seq_pos_max(self._memory, slot.seq_id) + 1
        if read != size or cells != len(entry.tokens):
            llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, -1, -1)
            store.drop(entry, f"llama.cpp took {read} of {size} bytes, {cells} cells for "
                              f"{len(entry.tokens)} tokens")
            return
        slot.tokens, slot.disk = list(entry.tokens), len(entry.tokens)
        slot.last_used, slot.cache_key = time.monotonic(), job.request.cache_key
        log.info("restored %d cached tokens from %s into slot %d in %.3f s",
                 len(entry.tokens), entry.path.name, slot.seq_id,
                 time.perf_counter() - started)

    def fail_all(self, message: str) -> list[tuple[str, Event]]:
        """End every request with an error (after a failed decode) and clear the caches."""
        jobs = [s.job for s in self.slots if s.job is not None] + list(self.waiting)
        self.waiting.clear()
        for slot in self.slots:
            slot.job, slot.tokens, slot.shifts, slot.disk = None, [], [], 0
            slot.logits, slot.logits_at = None, 0
        llama_cpp.llama_memory_clear(self._memory, True)
        for job in jobs:
            if job.release is not None:
                job.release()
        return [(job.stream_id, ErrorEvent(message)) for job in jobs]

    # -- one step --------------------------------------------------------------------------
    def step(self) -> list[tuple[str, Event]]:
        """Decode one batch; return the events it produced, per stream."""
        self._assign()
        out: list[tuple[str, Event]] = []
        running = [s for s in self.slots if s.job is not None]
        for slot in running:
            job = slot.running
            if job.is_cancelled():
                out += self._finish(slot, "cancelled")
            elif job.stored_logits is not None:  # a prompt seen whole before
                logits, job.stored_logits = job.stored_logits, None
                out += self._accept(slot, self._sample_from(job, logits))
        running = [s for s in self.slots if s.job is not None]
        if not running or out:
            # A step's events go out when it returns: a first token from stored logits
            # (or a cancellation) goes now, not after the next decode (20 ms on the 0.5B).
            return out
        for slot in running:
            self._decode_media(slot)

        self.batch.reset()
        b = self.batch.batch
        # slot, first row, tokens, prefill, proposed tokens (speculative decoding)
        rows: list[tuple[Slot, int, list[int], bool, list[int]]] = []

        def add(slot: Slot, tokens: list[int], first_pos: int, logits_from: int,
                proposal: Sequence[int] = ()) -> None:
            start = b.n_tokens
            for i, tok in enumerate(tokens):
                j = start + i
                b.token[j], b.pos[j] = tok, first_pos + i
                b.seq_id[j][0], b.n_seq_id[j] = slot.seq_id, 1
                b.logits[j] = i >= logits_from
            b.n_tokens = start + len(tokens)
            rows.append((slot, start, tokens, slot.running.next_token is None,
                         list(proposal)))

        decoding = [s for s in running if s.running.next_token is not None][: self.n_batch]
        prefilling = sorted((s for s in running if s.running.next_token is None
                             and s.running.pos < len(s.running.prompt)),
                            key=lambda s: s.running.started)  # oldest request first
        # every decoding sequence's row, then as much of the prompts as fits; proposals
        # only in steps without prompt rows (their verification then stays cheap)
        pieces = plan_prompt_rows(prefilling, self.n_batch - len(decoding))
        for slot, start, end in pieces:
            prompt = slot.running.prompt
            add(slot, prompt[start:end], slot.kv_pos(start), end - start - 1
                if end == len(prompt) else end - start)
        proposals = self._proposals(decoding) if not pieces else {}
        for slot in decoding:
            proposal = proposals.get(slot.seq_id, [])
            pending = slot.running.next_token
            assert pending is not None  # what makes the slot one of `decoding`
            add(slot, [pending, *proposal], slot.kv_pos(len(slot.tokens)), 0, proposal)
        is_decode = not pieces
        started = time.perf_counter()
        self.ctx.decode(self.batch)
        self._copying.clear()  # llama.cpp made the pending stream copies first
        step_s = time.perf_counter() - started
        if is_decode:
            self.times.record(b.n_tokens, step_s)

        rechecks: list[Recheck] = []
        for slot, start, tokens, prefill, proposal in rows:
            job = slot.running
            base = len(slot.tokens)
            slot.tokens += tokens
            if prefill:
                job.pos += len(tokens)
                if job.pos < len(job.prompt):
                    continue
                slot.logits = self._logits(start + len(tokens) - 1)
                slot.logits_at = len(job.prompt)
            else:
                job.next_token = None
            if not proposal:
                token = self._sample(job, start + len(tokens) - 1)
                if job.spec is not None:
                    job.spec.decoded_plainly(token)
                out += self._accept(slot, token)
            else:
                out += self._verify(slot, start, base, proposal, step_s, rechecks)
        for recheck in rechecks:  # after every row of the batch was read: each decodes
            out += self._recheck(recheck)
        return out

    def _proposals(self, decoding: list[Slot]) -> dict[int, list[int]]:
        """The tokens each speculating sequence proposes this step (by seq id), as many as
        its cost model says pay off (Speculation.choose)."""
        out: dict[int, list[int]] = {}
        drafts: dict[int, list[tuple[Slot, int, list[int]]]] = {}  # slot, k, its tokens
        spare = self.n_batch - len(decoding)
        for slot in decoding:
            job = slot.running
            if job.spec is None or spare <= 0:
                continue
            limit = min(job.max_new - job.n_out - 1, self.n_ctx_seq - 1 - len(slot.tokens),
                        spare)
            job.spec.remaining = job.max_new - job.n_out
            history = (slot.tokens + [job.next_token]
                       if job.draft is not None and job.next_token is not None else [])
            cost = (DraftCost(job.draft.round_s, job.draft.behind(slot.seq_id, history),
                              job.draft.prefill_s) if job.draft is not None else None)
            rows = self.n_batch - spare  # the decodes, and proposals chosen before this one
            k = job.spec.choose(limit, self.times, len(decoding), rows, cost)
            if k <= 0:
                continue
            if job.spec.lookup is not None:
                proposal = self._grammatical(job, job.spec.lookup.propose(k))
                if proposal:
                    out[slot.seq_id] = proposal
                    spare -= len(proposal)
            else:
                drafts.setdefault(id(job.draft), []).append((slot, k, history))
                spare -= k
        for wants in drafts.values():
            draft = wants[0][0].running.draft
            assert draft is not None  # only jobs with a draft model are in `drafts`
            started = time.perf_counter()
            made = draft.propose([(slot.seq_id, history, k) for slot, k, history in wants])
            share = (time.perf_counter() - started) / len(wants)
            for (slot, _, _), proposal in zip(wants, made, strict=True):
                proposal = self._grammatical(slot.running, proposal)
                if proposal:
                    out[slot.seq_id] = proposal
                slot.running.propose_s = share
        for slot in decoding:
            spec = slot.running.spec
            if slot.seq_id in out and spec is not None:
                spec.proposed += len(out[slot.seq_id])
        return out

    @staticmethod
    def _grammatical(job: Job, proposal: list[int]) -> list[int]:
        """The proposal up to the first token the request's grammar rejects (its state is
        after the pending token, which `_accept` consumed)."""
        if job.grammar is None:
            return proposal
        return proposal[:job.grammar.valid_prefix(proposal)]

    def _verify(self, slot: Slot, start: int, base: int, proposal: list[int],
                step_s: float, rechecks: list[Recheck]) -> list[tuple[str, Event]]:
        """Sample at each proposed position with the request's own sampler while the samples
        equal the proposal; the first sample that differs (or the one after the last
        proposed token) is the next token. Rejected tokens leave the KV cache. A greedy
        position at a near-tie stops the verification there: `rechecks` gets it, to be
        sampled from a one-row step once the batch's other rows are read."""
        job = slot.running
        spec = job.spec
        assert spec is not None  # only a speculating request has a proposal
        out: list[tuple[str, Event]] = []
        matched = 0
        for i in range(len(proposal) + 1):
            if self._near_tie(job, start + i):
                rechecks.append(Recheck(slot, base + i, i, proposal, matched, step_s))
                return out
            token = self._sample(job, start + i)
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
            if not llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id,
                                                 slot.kv_pos(keep), -1):
                raise RuntimeError("llama.cpp could not drop rejected speculative tokens")
            slot.cut(keep)
        return out

    def _near_tie(self, job: Job, row: int) -> bool:
        """Whether a greedy request's top two logits at batch row `row` are within NEAR_TIE."""
        if job.request.sampling.temperature != 0 or NEAR_TIE <= 0:
            return False
        logits = logits_row(self.ctx.ctx, row, self.n_vocab)
        best = int(np.argmax(logits))
        top = logits[best]
        logits[best] = -np.inf  # llama.cpp's own buffer: put back right after
        second = logits.max()
        logits[best] = top
        return bool(top - second < NEAR_TIE)

    def _recheck(self, recheck: Recheck) -> list[tuple[str, Event]]:
        """Evaluate a near-tie position's row alone, as plain decoding would, and take the
        token sampled there: the proposal's tokens after it leave the KV cache."""
        slot, job = recheck.slot, recheck.slot.running
        if not llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id,
                                             slot.kv_pos(recheck.pos), -1):
            raise RuntimeError("llama.cpp could not drop rejected speculative tokens")
        slot.cut(recheck.pos + 1)  # the row's own token is evaluated again
        self.one_row.set_batch(slot.tokens[recheck.pos:], slot.kv_pos(recheck.pos), True)
        self.one_row.batch.seq_id[0][0] = slot.seq_id
        started = time.perf_counter()
        self.ctx.decode(self.one_row)
        token = self._sample(job, 0)
        spec = job.spec
        assert spec is not None  # a recheck comes from a proposal's verification
        hit = recheck.index < len(recheck.proposal) and token == recheck.proposal[recheck.index]
        spec.accepted += hit
        spec.observe(len(recheck.proposal), recheck.matched + hit)
        spec.realize(recheck.index + 1, job.propose_s + recheck.step_s
                     + time.perf_counter() - started)
        job.propose_s = 0.0
        return self._accept(slot, token)  # the next token, pending like any sampled one

    def _logits(self, row: int) -> np.ndarray:
        return logits_row(self.ctx.ctx, row, self.n_vocab).copy()

    def _sample(self, job: Job, row: int) -> int:
        """The job's next token from batch row `row`: its grammar masks the row in llama.cpp's
        own buffer (only this row: other sequences' rows are untouched), then its sampler
        chain samples there as it would without one. A greedy request without penalties
        takes the row's argmax (the first, as llama.cpp's greedy sampler does) without the
        chain, which would first copy all of the vocabulary's logits into a candidate array
        (0.2 ms a token with Qwen's 152k). A request for logprobs gets them from the row as
        the model gave it, before the grammar's mask."""
        raw = (logits_row(self.ctx.ctx, row, self.n_vocab).copy()
               if job.request.logprobs is not None else None)
        if job.grammar is not None:
            job.grammar.mask(logits_row(self.ctx.ctx, row, self.n_vocab))
        if job.argmax:
            token = int(np.argmax(logits_row(self.ctx.ctx, row, self.n_vocab)))
        else:
            token = job.sampler.sample(self.ctx, row)
        return self._with_logprob(job, raw, token)

    def _with_logprob(self, job: Job, raw: np.ndarray | None, token: int) -> int:
        """Keep the token's log-probability for `_accept`, if the request asked for it."""
        if raw is not None:
            job.logprob = token_logprob(raw, token, job.request.logprobs or 0,
                                        self.token_bytes)
        return token

    def _sample_from(self, job: Job, logits: np.ndarray) -> int:
        """What `_sample` does (llama_sampler_sample), on stored logits (which stay
        unmasked: the next request with this prompt may have another grammar)."""
        sampler = job.sampler
        raw = logits if job.request.logprobs is not None else None
        if job.grammar is not None:
            logits = logits.copy()
            job.grammar.mask(logits)
        if job.argmax:
            return self._with_logprob(job, raw, int(np.argmax(logits)))
        data = (llama_cpp.llama_token_data * self.n_vocab)()
        view = np.ctypeslib.as_array(data)
        view["id"], view["logit"], view["p"] = np.arange(self.n_vocab), logits, 0.0
        candidates = llama_cpp.llama_token_data_array(
            data=data, size=self.n_vocab, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(sampler.sampler, ctypes.byref(candidates))
        token = data[candidates.selected].id
        llama_cpp.llama_sampler_accept(sampler.sampler, token)
        return self._with_logprob(job, raw, token)

    def _accept(self, slot: Slot, token: int) -> list[tuple[str, Event]]:
        job = slot.running
        logprob, job.logprob = job.logprob, None
        if self.is_eog(token):
            return self._finish(slot, "stop")
        if job.grammar is not None:
            job.grammar.accept(token)
        job.n_out += 1
        if job.spec is not None and job.spec.lookup is not None:
            job.spec.lookup.extend([token])
        events = job.emitted(self.detokenize(token), logprob)
        if job.text.stopped:
            return events + self._finish(slot, "stop")
        if job.n_out >= job.max_new:
            return events + self._finish(slot, "length")
        job.next_token = token
        return events

    def _decode_media(self, slot: Slot) -> None:
        """Decode the images and clips the slot's prefill has reached (each on its own: an
        embeddings batch takes no token rows), so the step's prompt rows go on after them."""
        job = slot.running
        while job.next_token is None and (span := job.span_at(job.pos)) is not None:
            if self.projector is None:
                raise RuntimeError("a prompt with media reached an engine without a projector")
            if len(slot.tokens) != job.pos:
                raise RuntimeError(f"slot {slot.seq_id} holds {len(slot.tokens)} tokens where "
                                   f"its prompt is at {job.pos}")
            first = slot.kv_pos(job.pos)
            after = self.projector.decode(self.ctx.ctx, span, first, slot.seq_id, self.n_batch)
            self._copying.clear()  # a decode ran: llama.cpp made the pending stream copies
            slot.tokens += job.prompt[span.start:span.end]
            if after - first != span.n_tokens:
                slot.shifts.append((span.end, span.n_tokens - (after - first)))
            job.pos = span.end

    def _finish(self, slot: Slot, reason: FinishReason) -> list[tuple[str, Event]]:
        job = slot.running
        slot.job = None
        slot.last_used = time.monotonic()
        if job.release is not None:
            job.release()
        return job.finish(reason, prompt_tokens=len(job.prompt), completion_tokens=job.n_out,
                          cached_tokens=job.reused, disk_tokens=job.disk, media_tokens=sum(
                              s.n_tokens for s in job.spans),
                          draft_tokens=job.spec.proposed if job.spec else 0,
                          accepted_tokens=job.spec.accepted if job.spec else 0)
