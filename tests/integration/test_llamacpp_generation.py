"""The llama.cpp backend through the Runtime, on the real Qwen2.5-Coder-0.5B-Instruct."""

from __future__ import annotations

import os
import queue
import signal
import time
from dataclasses import replace

import pytest

from app.gguf_file import read_gguf
from app.runtime import Runtime
from backends.base import (
    DoneEvent,
    ErrorEvent,
    GenerationRequest,
    Message,
    SamplingParams,
    TokenEvent,
)
from backends.chat_template import render_chat
from backends.errors import InvalidRequestError

GREEDY = SamplingParams(temperature=0.0, max_tokens=200)


def ask(text: str, sampling: SamplingParams = GREEDY, system: str | None = None):
    messages = ((Message("system", system),) if system else ()) + (Message("user", text),)
    return GenerationRequest(messages=messages, sampling=sampling)


def test_greedy_reverse_string_is_correct_and_deterministic(runtime, qwen):
    request = ask("Write a Python function that reverses a string. Use slicing.")
    text1, stats1 = runtime.generate(qwen.ref, request).result()
    text2, _ = runtime.generate(qwen.ref, request).result()
    assert text1 == text2
    assert "def " in text1 and "[::-1]" in text1
    assert stats1.completion_tokens > 10 and stats1.decode_tokens_per_s > 0
    assert stats1.finish_reason in ("stop", "length")


def test_stream_pieces_add_up_to_the_final_text(runtime, qwen):
    events = list(runtime.generate(qwen.ref, ask("Say hello in French.")))
    pieces = [e.text for e in events if isinstance(e, TokenEvent)]
    done = events[-1]
    assert isinstance(done, DoneEvent) and len(pieces) > 1
    assert "".join(pieces) == done.text


def test_chat_template_framing_is_applied(runtime, qwen):
    template = read_gguf(qwen.path).chat_template
    rendered = render_chat(template, [{"role": "system", "content": "You answer in one word."},
                                      {"role": "user", "content": "Capital of France?"}])
    expected_tokens = runtime.tokenize(qwen.ref, rendered)
    text, stats = runtime.generate(qwen.ref, ask("Capital of France?",
                                                 system="You answer in one word.")).result()
    assert stats.prompt_tokens == len(expected_tokens)
    assert "Paris" in text
    assert stats.finish_reason == "stop"  # the model ended its turn with <|im_end|>
    assert "<|im_end|>" not in text


def test_stop_string_ends_the_stream_with_reason_stop(runtime, qwen):
    full, _ = runtime.generate(qwen.ref, ask("Count from 1 to 20, separated by commas.")).result()
    assert "7" in full
    stopped, stats = runtime.generate(qwen.ref, ask(
        "Count from 1 to 20, separated by commas.",
        SamplingParams(temperature=0.0, max_tokens=200, stop=("7",)))).result()
    assert stats.finish_reason == "stop"
    assert stopped == full[:full.index("7")]


def test_max_tokens_ends_the_stream_with_reason_length(runtime, qwen):
    text, stats = runtime.generate(qwen.ref, ask(
        "Write a long essay about compilers.",
        SamplingParams(temperature=0.0, max_tokens=5))).result()
    assert stats.completion_tokens == 5
    assert stats.finish_reason == "length"
    assert text


def test_seeded_sampling_repeats_and_different_seeds_differ(runtime, qwen):
    def sample(seed: int) -> str:
        return runtime.generate(qwen.ref, ask(
            "Invent a name for a cat.",
            SamplingParams(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=seed,
                           max_tokens=24))).result()[0]

    a, b = sample(1), sample(1)
    assert a == b
    assert any(sample(s) != a for s in (2, 3, 4))


def test_cancel_stops_a_stream_within_a_second(runtime, qwen):
    generation = runtime.generate(qwen.ref, ask(
        "Write a very long story about a dragon.",
        SamplingParams(temperature=0.0, max_tokens=2000)))
    tokens = 0
    for event in generation:
        if isinstance(event, TokenEvent):
            tokens += 1
            if tokens == 5:
                cancelled_at = time.monotonic()
                generation.cancel()
        elif isinstance(event, DoneEvent):
            assert event.stats.finish_reason == "cancelled"
            assert time.monotonic() - cancelled_at < 1.0
            assert event.stats.completion_tokens < 100
            break
    else:
        pytest.fail("no DoneEvent")


def test_breaking_out_of_a_stream_cancels_it(runtime, qwen):
    for event in runtime.generate(qwen.ref, ask("Write a very long story.",
                                                SamplingParams(max_tokens=2000))):
        if isinstance(event, TokenEvent):
            break
    started = time.monotonic()
    text, _ = runtime.generate(qwen.ref, ask("Say OK.", SamplingParams(temperature=0,
                                                                        max_tokens=5))).result()
    assert text and time.monotonic() - started < 5  # not stuck behind 2000 tokens


def test_worker_killed_by_sigsegv_gives_a_clear_error_and_the_next_request_works(store, qwen):
    with Runtime(store=store) as rt:
        loaded = rt.load(qwen.ref, context=2048)
        events = []
        for event in rt.generate(qwen.ref, ask("Write a long story.",
                                               SamplingParams(max_tokens=1000))):
            events.append(event)
            if len(events) == 3:
                os.kill(loaded.pid, signal.SIGSEGV)
        error = events[-1]
        assert isinstance(error, ErrorEvent) and error.kind == "crash"
        assert "SIGSEGV" in error.message and qwen.ref in error.message
        text, stats = rt.generate(qwen.ref, ask("Say OK.", SamplingParams(
            temperature=0, max_tokens=8))).result()
        assert text and stats.completion_tokens > 0
        assert rt.loaded()[0].pid != loaded.pid  # a fresh worker


def test_overlong_conversation_drops_oldest_turns_and_says_truncated(store, qwen):
    filler = "Here is some context about the project. " * 20  # ~180 tokens per turn
    history = [Message("system", "You are a helpful assistant.")]
    for i in range(6):
        history += [Message("user", f"Note {i}: {filler}"), Message("assistant", "Noted.")]
    history.append(Message("user", "Reply with the single word: done"))
    with Runtime(store=store) as rt:
        rt.load(qwen.ref, context=512)
        request = GenerationRequest(messages=tuple(history),
                                    sampling=SamplingParams(temperature=0, max_tokens=16),
                                    truncate=True)
        text, stats = rt.generate(qwen.ref, request).result()
        assert stats.truncated is True
        assert stats.prompt_tokens + 16 <= 512
        assert "done" in text.lower()

        short = GenerationRequest(messages=(Message("user", "Say hi"),),
                                  sampling=SamplingParams(temperature=0, max_tokens=8),
                                  truncate=True)
        assert rt.generate(qwen.ref, short).result()[1].truncated is False


def test_a_last_message_longer_than_the_context_is_a_clear_error(store, qwen):
    with Runtime(store=store) as rt:
        rt.load(qwen.ref, context=512)
        request = replace(ask("word " * 2000, SamplingParams(max_tokens=16)), truncate=True)
        with pytest.raises(InvalidRequestError, match="the last message alone is"):
            rt.generate(qwen.ref, request).result()


def test_a_conversation_that_may_not_be_cut_is_refused_whole_with_its_numbers(store, qwen):
    filler = "Here is some context about the project. " * 20
    history = [Message("user", f"Note {i}: {filler}") for i in range(6)]
    request = GenerationRequest(messages=(*history, Message("user", "Say done")),
                                sampling=SamplingParams(temperature=0, max_tokens=16))
    with Runtime(store=store) as rt:
        rt.load(qwen.ref, context=512)
        with pytest.raises(InvalidRequestError,
                           match=r"the prompt is 1\d{3} tokens; with room for the answer \(16 "
                                 r"tokens\) the loaded context \(512 tokens\) holds 496"):
            rt.generate(qwen.ref, request).result()


@pytest.mark.parametrize("sampling, message", [
    (SamplingParams(max_tokens=-1), "max_tokens must be at least 1"),
    (SamplingParams(temperature=3.0), "temperature must be between 0 and 2"),
    (SamplingParams(temperature=float("nan")), "temperature must be between 0 and 2"),
    (SamplingParams(top_p=0.0), "top_p"),
    (SamplingParams(stop=("",)), "stop"),
])
def test_bad_sampling_settings_are_rejected_before_reaching_the_worker(runtime, qwen, sampling,
                                                                      message):
    with pytest.raises(InvalidRequestError, match=message):
        runtime.generate(qwen.ref, ask("hi", sampling))


def test_empty_prompt_is_rejected(runtime, qwen):
    with pytest.raises(InvalidRequestError, match="empty"):
        runtime.generate(qwen.ref, ask("   "))
    with pytest.raises(InvalidRequestError, match="empty"):
        runtime.generate(qwen.ref, GenerationRequest(prompt=""))


def test_base_model_completes_a_raw_prompt(store, gemma):
    with Runtime(store=store) as rt:
        prompt = "Monday, Tuesday, Wednesday,"
        request = GenerationRequest(prompt=prompt,
                                    sampling=SamplingParams(temperature=0, max_tokens=8))
        text, stats = rt.generate(gemma.ref, request).result()
        assert text.startswith(" Thursday")
        # BOS is added, as the file's tokenizer.ggml.add_bos_token asks
        assert stats.prompt_tokens == len(rt.tokenize(gemma.ref, prompt)) + 1

        chat = GenerationRequest(messages=(Message("user", "hi"),))
        with pytest.raises(InvalidRequestError, match="has no chat template"):
            rt.generate(gemma.ref, chat).result()


def test_follow_up_turn_reuses_the_cached_prompt_and_matches_a_fresh_run(store, qwen):
    code = "\n".join(f"def f{i}(x):\n    return x + {i}" for i in range(30))
    turn1 = [Message("user", f"Here is my module:\n{code}\nWhat does f3 return for 1?")]
    greedy = SamplingParams(temperature=0, max_tokens=24)
    with Runtime(store=store) as rt:
        answer, first = rt.generate(qwen.ref, GenerationRequest(
            messages=tuple(turn1), sampling=greedy)).result()
        assert first.cached_tokens == 0
        turn2 = (*turn1, Message("assistant", answer), Message("user", "And f7 for 2?"))
        cached_text, second = rt.generate(qwen.ref, GenerationRequest(
            messages=turn2, sampling=greedy)).result()
        assert second.cached_tokens >= first.prompt_tokens - 64  # all but the last chunk
    with Runtime(store=store) as fresh:
        fresh_text, third = fresh.generate(qwen.ref, GenerationRequest(
            messages=turn2, sampling=greedy)).result()
        assert third.cached_tokens == 0
    assert cached_text == fresh_text


def test_a_file_llama_cpp_rejects_fails_inside_the_worker_with_a_clear_error(isolated_home,
                                                                             tmp_path):
    from app.store import Store
    from backends.errors import BackendError
    from tests.support.tiny_gguf import write_tiny_gguf

    store = Store(isolated_home)
    # A valid GGUF header for a llama model that lacks almost every tensor llama.cpp needs.
    model = store.import_gguf(write_tiny_gguf(tmp_path / "hollow.gguf", name="Hollow"))
    with Runtime(store=store) as rt:
        with pytest.raises(BackendError, match=r"could not load hollow:ALL_F32: .*hollow\.gguf"):
            rt.load(model.ref)
        assert rt.loaded() == []


def test_a_model_that_would_not_fit_beside_another_evicts_the_least_recently_used(store, qwen,
                                                                                  gemma):
    from app.fit import plan_load
    from app.hardware import HardwareProfile

    # RAM for one of them at a time: the fit model says qwen needs ~0.66 GB, gemma ~0.41 GB
    need = {m.ref: plan_load(read_gguf(m.path), detect_small(1), 2048).memory_bytes
            for m in (qwen, gemma)}
    budget = max(need.values()) + min(need.values()) // 2
    small = HardwareProfile(os="t", machine="x86_64", cpu="t", physical_cores=2,
                            logical_cores=2, isa=("avx2",), ram_total=8 * 2**30,
                            ram_available=int(budget / 0.9) + 1)
    with Runtime(store=store, hardware=small) as rt:
        rt.load(qwen.ref, context=2048)
        rt.load(gemma.ref, context=2048)
        assert [m.model.ref for m in rt.loaded()] == [gemma.ref]
        text, _ = rt.generate(qwen.ref, GenerationRequest(
            prompt="def add(a, b):", sampling=SamplingParams(temperature=0, max_tokens=4))
        ).result()
        assert text and [m.model.ref for m in rt.loaded()] == [qwen.ref]


def detect_small(cores: int):
    from app.hardware import HardwareProfile

    return HardwareProfile(os="t", machine="x86_64", cpu="t", physical_cores=cores,
                           logical_cores=cores, isa=("avx2",), ram_total=64 * 2**30,
                           ram_available=60 * 2**30)


def test_a_prompt_is_counted_while_another_prompts_batch_runs(runtime, qwen):
    """A prompt count (Anthropic's count_tokens, the window's context meter) does not wait
    for the engine step running: the worker answers it at once from its reader thread.
    Here the count returns while a ~450-token prompt's one batch (seconds on 2 cores) has
    not given its first token yet, and counts what that request's own generation then
    reports."""
    events: queue.Queue = queue.Queue()
    filler = " ".join(f"item{i}" for i in range(125))  # no earlier prompt shares it
    long = ask(f"{time.time_ns()} Sort these words: {filler}",
               SamplingParams(temperature=0.0, max_tokens=2))
    assert 300 < runtime.count_prompt_tokens(qwen.ref, long) < 512  # one batch of the engine's
    generation = runtime.generate(qwen.ref, long, sink=events)
    try:
        time.sleep(0.5)  # the worker has rendered the prompt and is inside its batch
        other = ask("Capital of France?")
        counted = runtime.count_prompt_tokens(qwen.ref, other)
        assert events.empty(), "the count waited for the prompt batch"
        while not isinstance(events.get(timeout=300), DoneEvent):
            pass
    finally:
        generation.close()
    _, stats = runtime.generate(qwen.ref, other).result()
    assert counted == stats.prompt_tokens
