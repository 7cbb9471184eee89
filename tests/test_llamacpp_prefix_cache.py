"""The llama.cpp engine's prompt cache is exact: a prompt whose prefix a slot already holds
gets bit-for-bit the logits a fresh context computes (backends/llamacpp/engine.py explains
why that needs pieces aligned to llama.cpp's 16-row kernel blocks), and a shared system
prompt shorter than 64 tokens is reused."""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np
import pytest
from llama_cpp._internals import LlamaSampler

from backends.base import DoneEvent, GenerationRequest, LoadPlan, Message, SamplingParams
from backends.llamacpp import engine
from backends.llamacpp.backend import LlamaCppBackend

SYSTEM = "You are a careful senior engineer who answers with short, correct code. "
USERS = ["Reverse a string in Python." * 9, "Reverse a string in Python.",
         "Reverse a string in Python!", "Write a prime check.", "Debounce in JS.",
         "Explain this: " + "x = [i * i for i in range(10)]; " * 6,
         "Explain: " + "def f(a):\n    return a + 1\n" * 5]


@pytest.fixture
def first_logits(monkeypatch):
    """Run a request to its first token on a backend; return that token's logits and the
    prompt tokens the cache supplied."""
    seen: list[np.ndarray] = []
    sample = LlamaSampler.sample

    def recording(self, ctx, idx):  # noqa: ANN001
        n_vocab = llama_cpp.llama_vocab_n_tokens(
            llama_cpp.llama_model_get_vocab(llama_cpp.llama_get_model(ctx.ctx)))
        ptr = llama_cpp.llama_get_logits_ith(ctx.ctx, idx)
        seen.append(np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)),
                                          shape=(n_vocab,)).copy())
        return sample(self, ctx, idx)

    monkeypatch.setattr(LlamaSampler, "sample", recording)

    def run(backend: LlamaCppBackend, system: str, user: str) -> tuple[np.ndarray, int]:
        seen.clear()
        request = GenerationRequest(
            messages=(Message("system", system), Message("user", user)),
            sampling=SamplingParams(temperature=0, max_tokens=1))
        backend.submit("s", request)
        done = None
        while backend.has_work():
            done = next((e for _, e in backend.step() if isinstance(e, DoneEvent)), done)
        assert done is not None
        return seen[0], done.stats.cached_tokens

    return run


@pytest.mark.parametrize("repeats", [3, 9])  # a system prompt of about 40 and 130 tokens
def test_a_cached_prefix_gives_the_logits_of_a_fresh_context(qwen15, first_logits, repeats):
    plan = LoadPlan(context=1024, threads=2, parallel=1)
    fresh, warm = LlamaCppBackend(), LlamaCppBackend()
    fresh.load(qwen15, plan)
    warm.load(qwen15, plan)
    try:
        system_tokens = len(warm.tokenize(SYSTEM * repeats))
        reused = []
        for user in USERS:
            fresh.engine.slots[0].tokens, fresh.engine.slots[0].exact_upto = [], 0
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(fresh._ctx.ctx), True)
            expected, none_cached = first_logits(fresh, SYSTEM * repeats, user)
            got, cached = first_logits(warm, SYSTEM * repeats, user)
            assert none_cached == 0
            assert np.array_equal(got, expected), (user, cached, np.abs(got - expected).max())
            reused.append(cached)
    finally:
        fresh.unload()
        warm.unload()
    # every prompt after the first reuses the system prompt up to a piece boundary
    assert reused[0] == 0 and all(engine.boundary_floor(system_tokens) <= n
                                  == engine.boundary_floor(n) for n in reused[1:]), (
        system_tokens, reused)




def test_a_repeated_prompt_gets_the_same_logits_for_every_last_piece_length(qwen, first_logits):
    """A prompt's last piece is evaluated beside its whole pieces on a miss and alone on a
    hit. ggml-cpu multiplies unrepacked K-quant weights (Q6_K here) one row at a time below
    8 rows and in tiles from 8 on, so a last piece under 8 rows must go alone both times
    (measured before that rule: 0.28 apart for pieces of 3-5 rows). Each prompt starts from
    an empty context, so its cells lie as in a fresh one (see engine.py on layouts)."""
    backend = LlamaCppBackend()
    backend.load(qwen, LoadPlan(context=1024, threads=2, parallel=2))
    memory = llama_cpp.llama_get_memory(backend._ctx.ctx)
    try:
        lengths = set()
        for k in range(20):
            for slot in backend.engine.slots:
                slot.tokens, slot.exact_upto, slot.logits, slot.logits_at = [], 0, None, 0
            llama_cpp.llama_memory_clear(memory, True)
            user = "Write a Python function that reverses a string." + " please" * k
            miss, _ = first_logits(backend, SYSTEM, user)
            for slot in backend.engine.slots:  # evaluate the last piece again, not stored
                slot.logits, slot.logits_at = None, 0
            hit, cached = first_logits(backend, SYSTEM, user)
            n = len(backend.tokenize(f"{SYSTEM}{user}"))
            lengths.add(n % 16)
            assert cached > 0 and np.array_equal(hit, miss), (k, cached,
                                                              np.abs(hit - miss).max())
        assert len(lengths) == 16  # every last-piece length, give or take the template
    finally:
        backend.unload()


def test_the_same_prompt_again_starts_from_its_stored_logits(qwen):
    """A regenerated answer or a retried request evaluates nothing: the slot kept the logits
    its prompt's evaluation ended on, and the request's own sampler draws from them."""
    backend = LlamaCppBackend()
    backend.load(qwen, LoadPlan(context=1024, threads=2, parallel=2))

    def answer(temperature: float, seed: int | None = None) -> tuple[str, int, int]:
        backend.submit("s", GenerationRequest(
            messages=(Message("user", "Name three sorting algorithms."),),
            sampling=SamplingParams(temperature=temperature, seed=seed, max_tokens=12)))
        done = None
        while backend.has_work():
            done = next((e for _, e in backend.step() if isinstance(e, DoneEvent)), done)
        return done.text, done.stats.cached_tokens, done.stats.prompt_tokens

    try:
        first, cached, n = answer(0)
        assert cached == 0
        assert answer(0) == (first, n, n)  # the whole prompt from the cache, same answer
        sampled = answer(1.0, seed=5)
        assert sampled[1] == n and answer(1.0, seed=5) == sampled  # the seed still decides
        for slot in backend.engine.slots:  # evaluated again: the same draw as from storage
            slot.logits, slot.logits_at = None, 0
        again = answer(1.0, seed=5)
        assert again[0] == sampled[0] and again[1] < n
    finally:
        backend.unload()



def test_a_new_conversation_shares_the_system_prompt_without_evicting_another(qwen):
    """Two conversations with the same system prompt: the second takes a free slot with the
    shared cells (llama_memory_seq_cp) rather than cutting the first's cache, so the first's
    next request still finds its whole prompt."""
    backend = LlamaCppBackend()
    backend.load(qwen, LoadPlan(context=1024, threads=2, parallel=3))

    def ask(user: str) -> tuple[int, int, str]:
        backend.submit("s", GenerationRequest(
            messages=(Message("system", SYSTEM * 2), Message("user", user)),
            sampling=SamplingParams(temperature=0, max_tokens=6)))
        done = None
        while backend.has_work():
            done = next((e for _, e in backend.step() if isinstance(e, DoneEvent)), done)
        return done.stats.cached_tokens, done.stats.prompt_tokens, done.text

    try:
        first = ask("Reverse a string in Python.")
        assert first[0] == 0
        other = ask("Write a prime check.")
        assert 16 <= other[0] < other[1]  # the system prompt, from the first one's cells
        assert ask("Reverse a string in Python.") == (first[1], first[1], first[2])
        assert ask("Write a prime check.") == (other[1], other[1], other[2])
        seqs = {s.seq_id for s in backend.engine.slots if s.tokens}
        assert len(seqs) == 2
    finally:
        backend.unload()


def slot_at(seq_id: int, prompt_len: int, pos: int) -> engine.Slot:
    job = engine.Job(f"s{seq_id}", None, None, list(range(prompt_len)), None, 8,
                     truncated=False, text=None)
    job.pos = pos
    return engine.Slot(seq_id, job=job)


def test_pieces_of_several_prompts_keep_their_kernel_paths():
    a, b, c = slot_at(0, 45, 0), slot_at(1, 20, 0), slot_at(2, 100, 64)
    pieces = engine.plan_pieces([a, b, c], 63)
    # whole 16-token pieces first, each at a multiple of 16 rows; then the last pieces
    assert [(s.seq_id, p, e) for s, p, e in pieces] == [(0, 0, 16), (0, 16, 32), (1, 0, 16),
                                                        (0, 32, 45), (1, 16, 18)]
    assert sum(e - p for _, p, e in pieces) == 63
    # a last piece is cut to fit (no reuse reaches past the last boundary)
    pieces = engine.plan_pieces([c, a], 40)
    assert [(s.seq_id, p, e) for s, p, e in pieces] == [(0, 0, 16), (0, 16, 32), (2, 64, 72)]
    # a whole piece that does not fit waits: no part of it goes ahead
    assert engine.plan_pieces([slot_at(0, 45, 0)], 15) == []
    assert not engine.is_long_piece(c.job) and engine.is_long_piece(slot_at(3, 200, 64).job)


def test_prompts_evaluated_together_are_cached_for_their_next_turn(qwen15, first_logits):
    """Under load, one step carries several prompts' pieces and the running decodes, and the
    next turn of each conversation reuses what they left in the cache. Not bit for bit: other
    sequences' cells interleave with a conversation's in the shared buffer, and attention sums
    cells in buffer order (in 64-cell tiles for 64-row pieces), so a reused prefix rounds
    differently from a fresh context's (measured: up to 0.49 in a logit, 128 tokens reused)."""
    users = [USERS[0], USERS[3], USERS[5], USERS[6]]
    system = SYSTEM * 3
    fresh, warm = LlamaCppBackend(), LlamaCppBackend()
    fresh.load(qwen15, LoadPlan(context=1024, threads=2, parallel=1))
    warm.load(qwen15, LoadPlan(context=1024, threads=2, parallel=4))
    steps: list[dict[int, list[int]]] = []  # per decode call: seq id -> positions
    decode = warm.engine.ctx.decode

    def spy(batch):  # noqa: ANN001
        b = batch.batch
        rows: dict[int, list[int]] = {}
        for j in range(b.n_tokens):
            rows.setdefault(b.seq_id[j][0], []).append(b.pos[j])
        steps.append(rows)
        return decode(batch)

    warm.engine.ctx.decode = spy
    try:
        for i, user in enumerate(users):  # two at once, then two more while they decode
            warm.submit(f"s{i}", GenerationRequest(
                messages=(Message("system", system), Message("user", user)),
                sampling=SamplingParams(temperature=0, max_tokens=6)))
            if i % 2:
                for _ in range(2):
                    warm.step()
        while warm.has_work():
            warm.step()
        pieces_of = [[p for p in step.values() if len(p) >= engine.SMALL_PIECE]
                     for step in steps]
        assert any(len(p) >= 2 for p in pieces_of), "no step carried two prompts' pieces"
        assert any(p and any(len(r) == 1 for r in step.values())
                   for p, step in zip(pieces_of, steps, strict=True)), "no piece beside decodes"
        for user in users:
            follow_up = user + " Keep it short, please."
            fresh.engine.slots[0].tokens, fresh.engine.slots[0].exact_upto = [], 0
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(fresh._ctx.ctx), True)
            expected, _ = first_logits(fresh, system, follow_up)
            got, cached = first_logits(warm, system, follow_up)
            assert cached >= 48, (user, cached)
            # wrong positions or another sequence's rows would change the logits wholesale
            assert got.argmax() == expected.argmax(), (user, cached)
            assert np.abs(got - expected).max() < 1.0, (user, cached)
    finally:
        fresh.unload()
        warm.unload()
