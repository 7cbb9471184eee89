"""Conversations that survive a restart (backends/llamacpp/kv_store.py): the llama.cpp
backend saves its slots' KV caches when it unloads, and a new backend with the same model and
settings restores one for the next turn, which then evaluates only its new tokens and answers
as the warm backend did. Other settings restore nothing; a damaged file is dropped, logged,
and the turn still answers."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from backends.base import DoneEvent, GenerationRequest, LoadPlan, Message, SamplingParams
from backends.llamacpp import engine as engine_module
from backends.llamacpp.backend import LlamaCppBackend
from backends.llamacpp.kv_store import MIN_TOKENS, KvStore

SOURCE = Path(engine_module.__file__).read_text()
QUESTION = "In one sentence: what does `place` decide?"
FOLLOW_UP = "And `_swap`, in one sentence?"


def ask(backend: LlamaCppBackend, messages: tuple[Message, ...]) -> DoneEvent:
    request = GenerationRequest(messages=messages,
                                sampling=SamplingParams(temperature=0, max_tokens=12))
    done = list(backend.generate(request))[-1]
    assert isinstance(done, DoneEvent), done
    return done


def loaded(model, folder: Path, context: int = 4096, kv_cache: str = "f16") -> LlamaCppBackend:
    backend = LlamaCppBackend()
    backend.load(model, LoadPlan(context=context, threads=2, kv_cache=kv_cache,
                                 kv_store=str(folder)))
    return backend


def conversation(chars: int) -> tuple[Message, ...]:
    return (Message("system", "You review this Python module:\n" + SOURCE[:chars]),
            Message("user", QUESTION))


def test_the_next_turn_after_a_restart_reuses_the_saved_cache_and_answers_as_warm(
        qwen, tmp_path: Path):
    first = conversation(7000)  # about 2,000 tokens
    warm = loaded(qwen, tmp_path / "live")
    try:
        done = ask(warm, first)
        assert done.stats.prompt_tokens > 1500
        assert warm.engine is not None and warm.engine.save_states() == 1  # what unload does
        shutil.copytree(tmp_path / "live", tmp_path / "saved")  # the state after turn 1
        second = first + (Message("assistant", done.text), Message("user", FOLLOW_UP))
        warm_done = ask(warm, second)
    finally:
        warm.unload()  # saves again: the conversation after turn 2
    assert len(list((tmp_path / "live").glob("*.kv"))) == 1
    assert warm_done.stats.disk_tokens == 0

    restarted = loaded(qwen, tmp_path / "saved")
    try:
        after = ask(restarted, second)
    finally:
        restarted.unload()
    assert after.stats.cached_tokens >= done.stats.prompt_tokens
    assert after.stats.disk_tokens == after.stats.cached_tokens
    assert after.stats.cached_tokens == warm_done.stats.cached_tokens
    assert after.text == warm_done.text  # the same cells, the same batch shapes: greedy equal


@pytest.fixture(scope="module")
def saved_short(qwen, tmp_path_factory) -> tuple[Path, tuple[Message, ...]]:
    """A ~330-token conversation's cache, saved by unloading (context 2048, f16), and its
    next turn."""
    folder = tmp_path_factory.mktemp("kv") / "kv-cache"
    first = conversation(1100)
    backend = loaded(qwen, folder, context=2048)
    try:
        done = ask(backend, first)
    finally:
        backend.unload()
    assert done.stats.prompt_tokens > MIN_TOKENS
    assert len(list(folder.glob("*.kv"))) == 1
    return folder, first + (Message("assistant", done.text), Message("user", FOLLOW_UP))


@pytest.mark.parametrize("context, kv_cache", [(4096, "f16"), (2048, "q8_0")])
def test_another_context_or_kv_type_restores_nothing(qwen, saved_short, tmp_path: Path,
                                                     context, kv_cache):
    """The engine asks its store for the prompt's best saved cache before placing it
    (BatchEngine._from_disk): under other settings the store offers none, and leaves the
    other settings' file alone. (Evaluating the turn would only add a prefill.)"""
    folder, second = saved_short
    shutil.copytree(folder, tmp_path / "kv")
    saved = next((tmp_path / "kv").glob("*.kv"))
    same = loaded(qwen, tmp_path / "kv", context=2048)
    other = loaded(qwen, tmp_path / "kv", context=context, kv_cache=kv_cache)
    try:
        prompt, _, _ = other.prompt_tokens(GenerationRequest(messages=second))
        assert same.engine is not None and same.engine.kv_store is not None
        assert same.engine.kv_store.best(prompt)[1] > MIN_TOKENS  # the file serves it...
        assert other.engine is not None and other.engine.kv_store is not None
        assert other.engine.kv_store.best(prompt) == (None, 0)  # ...but not these settings
    finally:
        same.unload()
        other.unload()
    assert saved.exists()


def test_a_truncated_saved_cache_is_dropped_logged_and_the_turn_still_answers(
        qwen, saved_short, tmp_path: Path, caplog):
    folder, second = saved_short
    shutil.copytree(folder, tmp_path / "kv")
    path = next((tmp_path / "kv").glob("*.kv"))
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size // 2)
    backend = loaded(qwen, tmp_path / "kv", context=2048)
    try:
        with caplog.at_level(logging.WARNING, "backends.llamacpp.kv_store"):
            after = ask(backend, second)
    finally:
        backend.unload()
    assert after.stats.finish_reason in ("stop", "length") and after.text.strip()
    assert after.stats.cached_tokens == 0 and after.stats.disk_tokens == 0
    assert "dropped the saved KV cache" in caplog.text and not path.exists()


def test_a_saved_cache_whose_cells_are_not_its_tokens_is_dropped_logged_and_the_turn_answers(
        qwen, saved_short, tmp_path: Path, caplog):
    """A file whose header and checksum check out, but whose payload holds more cells than
    its tokens say (here: rewritten with its last 20 tokens left out of the header), is
    caught after llama.cpp reads it (BatchEngine._from_disk counts the cells): dropped,
    logged, and the turn evaluates its whole prompt."""
    folder, second = saved_short
    backend = loaded(qwen, tmp_path / "kv", context=2048)
    try:
        assert backend.engine is not None and backend.engine.kv_store is not None
        store = backend.engine.kv_store
        source = KvStore(folder, store.key)
        (entry,) = source.entries()
        payload = source.load(entry)
        assert payload is not None
        wrong = store.save(entry.tokens[:-20], payload)
        prompt, _, _ = backend.prompt_tokens(GenerationRequest(messages=second))
        assert store.best(prompt)[0] == wrong  # offered: only llama.cpp's count catches it
        with caplog.at_level(logging.WARNING, "backends.llamacpp.kv_store"):
            after = ask(backend, second)
    finally:
        backend.unload()
    assert after.stats.finish_reason in ("stop", "length") and after.text.strip()
    assert after.stats.cached_tokens == 0 and after.stats.disk_tokens == 0
    assert f"dropped the saved KV cache {wrong.path.name}: llama.cpp took" in caplog.text
    assert not wrong.path.exists()
