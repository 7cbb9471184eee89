"""The llama.cpp engine's prompt cache: a prompt whose prefix a slot already holds evaluates
only the rest, as llama-server does (backends/llamacpp/engine.py), the next turn of a
conversation reuses its answer's cells too, the same prompt again evaluates nothing, and a
shared system prompt is reused without evicting another conversation."""

from __future__ import annotations

from collections.abc import Callable

import llama_cpp
import numpy as np
import pytest

from backends.base import (
    DoneEvent,
    GenerationRequest,
    LoadPlan,
    Message,
    SamplingParams,
    TokenEvent,
)
from backends.llamacpp import engine as engine_module
from backends.llamacpp.backend import LlamaCppBackend
from backends.llamacpp.engine import NEAR_TIE, BatchEngine
from backends.llamacpp.speculative import common_prefix, logits_row

SYSTEM = "You are a careful senior engineer who answers with short, correct code. "
USERS = ["Reverse a string in Python." * 9, "Reverse a string in Python.",
         "Reverse a string in Python!", "Write a prime check.", "Debounce in JS.",
         "Explain this: " + "x = [i * i for i in range(10)]; " * 6,
         "Explain: " + "def f(a):\n    return a + 1\n" * 5]


def assert_same_first_token(got: np.ndarray, expected: np.ndarray, context: object) -> None:
    """A reused prefix's first token is a fresh context's, unless the fresh context's top two
    are a near-tie (within NEAR_TIE, the margin the engine treats as rounding noise), which
    another batch shape's rounding may flip."""
    top, chosen = int(expected.argmax()), int(got.argmax())
    assert chosen == top or expected[top] - expected[chosen] < NEAR_TIE, (
        context, top, chosen, float(expected[top] - expected[chosen]))


@pytest.fixture
def first_logits(monkeypatch):
    """Run a request to its first token on a backend; return that token's logits and the
    prompt tokens the cache supplied."""
    seen: list[np.ndarray] = []
    sample = BatchEngine._sample

    def recording(self, job, row):
        seen.append(logits_row(self.ctx.ctx, row, self.n_vocab).copy())
        return sample(self, job, row)

    monkeypatch.setattr(BatchEngine, "_sample", recording)

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
def test_a_cached_prefix_gives_the_first_token_of_a_fresh_context(qwen15, first_logits,
                                                                   repeats):
    """Cells computed in another batch shape round differently (llama.cpp's CPU kernels
    take other paths by rows), so a reused prefix's logits are close to a fresh context's,
    not bit-identical: within a fraction of a logit, and the same top token unless the top
    two are a near-tie (within NEAR_TIE, the margin the engine itself treats as rounding
    noise), which the rounding may flip (on an Intel Xeon, "Debounce in JS." did). Wrong
    positions or another sequence's cells would change them wholesale."""
    plan = LoadPlan(context=1024, threads=2, parallel=1)
    fresh, warm = LlamaCppBackend(), LlamaCppBackend()
    fresh.load(qwen15, plan)
    warm.load(qwen15, plan)
    try:
        system_tokens = len(warm.tokenize(SYSTEM * repeats))
        reused = []
        for user in USERS:
            fresh.engine.slots[0].tokens = []
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(fresh._ctx.ctx), True)
            expected, none_cached = first_logits(fresh, SYSTEM * repeats, user)
            got, cached = first_logits(warm, SYSTEM * repeats, user)
            assert none_cached == 0
            assert np.abs(got - expected).max() < 1.0, (user, cached)
            assert_same_first_token(got, expected, (user, cached))
            reused.append(cached)
    finally:
        fresh.unload()
        warm.unload()
    # every prompt after the first reuses at least the system prompt, to the token
    assert reused[0] == 0 and all(n >= system_tokens for n in reused[1:]), (
        system_tokens, reused)


def test_the_next_turn_evaluates_only_what_the_conversation_added(qwen):
    """The next turn's prompt holds the last prompt and the answer, re-rendered: the slot's
    cells of both are reused, and only the new message is evaluated."""
    backend = LlamaCppBackend()
    backend.load(qwen, LoadPlan(context=2048, threads=2, parallel=2))

    def turn(messages: tuple[Message, ...]) -> tuple[str, object]:
        backend.submit("s", GenerationRequest(messages=messages, sampling=SamplingParams(
            temperature=0, max_tokens=40)))
        done = None
        while backend.has_work():
            done = next((e for _, e in backend.step() if isinstance(e, DoneEvent)), done)
        return done.text, done.stats

    try:
        first = (Message("system", SYSTEM), Message("user", USERS[5]))
        answer, stats = turn(first)
        assert stats.cached_tokens == 0
        second = (*first, Message("assistant", answer),
                  Message("user", "Now make it a generator expression."))
        prompt, _, _ = backend.prompt_tokens(GenerationRequest(messages=second))
        slot = max(backend.engine.slots, key=lambda s: len(s.tokens))
        held = list(slot.tokens)  # the first prompt and the answer (but its last token)
        _, stats = turn(second)
        # every cell the second prompt shares was reused, the answer's too: only the new
        # message and the template around it were evaluated
        assert stats.prompt_tokens == len(prompt)
        assert stats.cached_tokens == common_prefix(held, prompt) >= len(held) - 2, (
            stats, len(held))
        assert stats.prompt_tokens - stats.cached_tokens < 30
        assert slot.tokens[:len(prompt)] == prompt  # the cache holds the conversation
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
        # the retry's first token comes out of its first step, before any decode
        engine = backend.engine
        decode, decoded = engine.ctx.decode, []
        engine.ctx.decode = lambda batch: (decoded.append(batch), decode(batch))[1]
        backend.submit("retry", GenerationRequest(
            messages=(Message("user", "Name three sorting algorithms."),),
            sampling=SamplingParams(temperature=0, max_tokens=12)))
        events = backend.step()
        assert not decoded
        assert any(isinstance(e, TokenEvent) and e.text for _, e in events), events
        while backend.has_work():
            backend.step()
        engine.ctx.decode = decode
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
    """Two conversations with the same system prompt: the second takes a free slot with a
    copy of the shared cells (llama_memory_seq_cp) rather than cutting the first's cache, so
    the first's next request still finds its whole prompt. (A first conversation holding
    fewer than engine.KEEP_TAIL tokens past the system prompt would be cut instead: a copy
    is a whole KV stream.)"""
    backend = LlamaCppBackend()
    backend.load(qwen, LoadPlan(context=1024, threads=2, parallel=3))

    def ask(user: str) -> tuple[int, int, str]:
        backend.submit("s", GenerationRequest(
            messages=(Message("system", SYSTEM * 2), Message("user", user)),
            sampling=SamplingParams(temperature=0, max_tokens=24)))
        done = None
        while backend.has_work():
            done = next((e for _, e in backend.step() if isinstance(e, DoneEvent)), done)
        return done.stats.cached_tokens, done.stats.prompt_tokens, done.text

    try:
        first = ask(USERS[0])  # long enough to be worth a copy
        assert first[0] == 0
        other = ask("Write a prime check.")
        assert 16 <= other[0] < other[1]  # the system prompt, from the first one's cells
        assert ask(USERS[0]) == (first[1], first[1], first[2])
        assert ask("Write a prime check.") == (other[1], other[1], other[2])
        seqs = {s.seq_id for s in backend.engine.slots if s.tokens}
        assert len(seqs) == 2
    finally:
        backend.unload()


def test_prompts_evaluated_together_are_cached_for_their_next_turn(qwen15, first_logits):
    """Under load, one step carries several prompts' pieces and the running decodes, and the
    next turn of each conversation reuses what they left in the cache. Not bit for bit: other
    sequences' cells interleave with a conversation's in the shared buffer, and attention sums
    cells in buffer order, so a reused prefix rounds differently from a fresh context's
    (measured: up to 0.49 in a logit, 128 tokens reused)."""
    users = [USERS[0], USERS[3], USERS[5], USERS[6]]
    system = SYSTEM * 3
    fresh, warm = LlamaCppBackend(), LlamaCppBackend()
    fresh.load(qwen15, LoadPlan(context=1024, threads=2, parallel=1))
    warm.load(qwen15, LoadPlan(context=1024, threads=2, parallel=4))
    steps: list[dict[int, list[int]]] = []  # per decode call: seq id -> positions
    decode = warm.engine.ctx.decode

    def spy(batch):
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
        pieces_of = [[p for p in step.values() if len(p) > 1] for step in steps]
        assert any(len(p) >= 2 for p in pieces_of), "no step carried two prompts' pieces"
        assert any(p and any(len(r) == 1 for r in step.values())
                   for p, step in zip(pieces_of, steps, strict=True)), "no piece beside decodes"
        for user in users:
            follow_up = user + " Keep it short, please."
            fresh.engine.slots[0].tokens = []
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(fresh._ctx.ctx), True)
            expected, _ = first_logits(fresh, system, follow_up)
            got, cached = first_logits(warm, system, follow_up)
            assert cached >= 48, (user, cached)
            # wrong positions or another sequence's rows would change the logits wholesale
            assert np.abs(got - expected).max() < 1.0, (user, cached)
            assert_same_first_token(got, expected, (user, cached))
    finally:
        fresh.unload()
        warm.unload()


@pytest.mark.parametrize("swap_limit", [engine_module.SWAP_MAX_BYTES, 0])
def test_moves_next_to_the_running_sequences_keep_the_caches_they_displace(qwen,
                                                                          monkeypatch,
                                                                          swap_limit):
    """Six slots: five conversations, then a long answer decoding in the sixth. Returning
    conversations move next to it (consecutive ids decode in fewer passes), each into a slot
    holding another conversation's only cache. Nothing is lost: the first move swaps the
    two caches (engine._swap, through host memory), the second finds the first one's old
    slot free and swaps again, and every displaced conversation's next turn reuses all of
    its cache, and the cells it finds are its own: its first token's logits are a fresh
    context's (within rounding; another conversation's cells would change them wholesale).
    Caches too large for a swap through host memory (SWAP_MAX_BYTES, 0 here) move by a
    copy, and a cache in their way is kept only where a slot holds a copy (engine.shelter).
    """
    monkeypatch.setattr(engine_module, "SWAP_MAX_BYTES", swap_limit)
    firsts: dict[int, np.ndarray] = {}  # id(job) -> the logits its first token came from
    sample = BatchEngine._sample

    def recording(self, job, row):
        firsts.setdefault(id(job), logits_row(self.ctx.ctx, row, self.n_vocab).copy())
        return sample(self, job, row)

    monkeypatch.setattr(BatchEngine, "_sample", recording)
    backend = LlamaCppBackend()
    backend.load(qwen, LoadPlan(context=1024, threads=2, parallel=6))
    fresh = LlamaCppBackend()
    fresh.load(qwen, LoadPlan(context=1024, threads=2, parallel=1))
    # each conversation holds more than KEEP_TAIL tokens past the template's shared prefix,
    # so a new one takes an empty slot with a copy of that prefix instead of cutting it
    code = "\n```python\ndef f(values):\n    return [v * 2 for v in values if v > 3]\n```"
    users = [f"{task}{code}" for task in ("Rename f.", "Add type hints.", "Add a docstring.",
                                           "Explain it.", "Write a test for it.")]
    answers: dict[str, DoneEvent] = {}

    def run(until: Callable[[], bool]) -> None:
        while backend.has_work() and not until():
            for stream, event in backend.step():
                if isinstance(event, DoneEvent):
                    answers[stream] = event

    def turn(i: int, again: bool = False) -> GenerationRequest:
        messages = (Message("user", users[i]),)
        if again:
            messages += (Message("assistant", answers[f"c{i}"].text), Message("user", "And?"))
        return GenerationRequest(messages=messages, sampling=SamplingParams(
            temperature=0, max_tokens=16 if again else 48))

    try:
        for i in range(5):  # conversations 0-4 in slots 0-4
            backend.submit(f"c{i}", turn(i))
            run(lambda: False)
        assert [len(s.tokens) > 0 for s in backend.engine.slots] == [True] * 5 + [False]
        held = {i: list(backend.engine.slots[i].tokens) for i in range(5)}
        backend.submit("long", GenerationRequest(
            messages=(Message("user", "Write a long story about a lighthouse."),),
            sampling=SamplingParams(temperature=0, max_tokens=120)))
        run(lambda: backend.engine.slots[5].job is not None
            and backend.engine.slots[5].job.n_out > 0)
        for i in (0, 1):  # each returns while the long answer decodes
            backend.submit(f"r{i}", turn(i, again=True))
            run(lambda i=i: any(s.job is not None and s.job.n_out > 0
                                and s.tokens[:len(held[i])] == held[i]
                                for s in backend.engine.slots[:5]))
        run(lambda: False)
        moved = {i: [s.seq_id for s in backend.engine.slots
                     if s.tokens[:len(held[i])] == held[i]] for i in range(5)}
        assert moved[2] == [2]
        if swap_limit == 0:
            # copies: the first move overwrote conversation 4's cache (no slot could keep
            # it); the second sheltered conversation 3's in conversation 0's old copy, and
            # conversation 1's old slot keeps a copy of it
            assert moved[0] == [4] and moved[1] == [1, 3]
            assert moved[3] == [0] and moved[4] == []
            return
        assert moved[0] == [4] and moved[1] == [3]  # next to the long answer in slot 5
        assert sorted(moved[3] + moved[4]) == [0, 1]  # the displaced, in their old slots
        for i in (2, 3, 4):
            request = turn(i, again=True)
            firsts.clear()
            backend.submit(f"c{i}-again", request)
            run(lambda: False)
            assert answers[f"c{i}-again"].stats.cached_tokens >= len(held[i]) - 1, i
            got = next(iter(firsts.values()))
            firsts.clear()
            fresh.engine.slots[0].tokens = []
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(fresh._ctx.ctx), True)
            list(fresh.generate(request))
            expected = next(iter(firsts.values()))
            assert got.argmax() == expected.argmax(), i
            assert np.abs(got - expected).max() < 1.0, i
    finally:
        backend.unload()
        fresh.unload()


def test_two_prompts_sent_at_once_evaluate_their_shared_prefix_once(qwen):
    """Two agent requests with one long system prompt, submitted together (Claude Code sends
    two on start): the second waits while the first evaluates the shared prefix, then takes
    a copy of it (engine.in_flight_prefix) instead of computing it beside the first. Each
    answer is the one it gets alone."""
    system = SYSTEM * 40  # about 640 tokens shared, past the threshold
    asks = {"a": "Write a Python function that reverses a string.",
            "b": "Write a Python function that checks whether a number is prime."}

    def request(user: str) -> GenerationRequest:
        return GenerationRequest(messages=(Message("system", system), Message("user", user)),
                                 sampling=SamplingParams(temperature=0, max_tokens=12))

    def run(backend: LlamaCppBackend, streams: list[str]) -> dict[str, DoneEvent]:
        for sid in streams:
            backend.submit(sid, request(asks[sid]))
        done: dict[str, DoneEvent] = {}
        while backend.has_work():
            done |= {sid: e for sid, e in backend.step() if isinstance(e, DoneEvent)}
        return done

    together, alone = LlamaCppBackend(), LlamaCppBackend()
    together.load(qwen, LoadPlan(context=2048, threads=2, parallel=2))
    alone.load(qwen, LoadPlan(context=1024, threads=2, parallel=1))
    try:
        done = run(together, ["a", "b"])
        shared = done["a"].stats.prompt_tokens - 20  # all but the user's turn, about
        assert done["a"].stats.cached_tokens == 0
        assert done["b"].stats.cached_tokens >= shared > engine_module.SHARE_IN_FLIGHT_MIN
        for sid in asks:
            assert run(alone, [sid])[sid].text == done[sid].text
            alone.engine.slots[0].tokens = []  # the next one starts fresh too
            llama_cpp.llama_memory_seq_rm(alone.engine._memory, 0, -1, -1)
    finally:
        together.unload()
        alone.unload()
