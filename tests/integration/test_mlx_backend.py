"""The mlx backend and `ember convert --to mlx`, on the real Qwen2.5-Coder-0.5B-Instruct GGUF
converted to MLX (kept in the test home, so only the first run converts: ~40 s here).

MLX's CPU backend (mlx[cpu] on Linux) is slow on this 2-core machine, so the tests load the
weights unpacked to float32 for OpenBLAS (LoadPlan.unpack_weights, as the fit model plans it
where OpenBLAS is installed), ask for few tokens and share one loaded backend.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil

import numpy as np
import pytest

from app.runtime import Runtime
from app.runtime.convert_to_mlx import convert_to_mlx
from app.store import InstalledModel
from backends.base import DoneEvent, GenerationRequest, LoadPlan, Message, SamplingParams
from backends.errors import EmberError, InvalidRequestError, ModelFileError
from backends.mlx.backend import MlxBackend
from backends.mlx.unpack import unpack_weights
from tests.support import REPO

# 256 tokens: a 95% agreement over 256 still fails a broken conversion (the forward pass of
# the whole text takes about 4 s with the weights unpacked for OpenBLAS, 150 s packed).
AGREEMENT_TOKENS = 256
REAL_TEXT = REPO / "README.md"


@pytest.fixture(scope="module")
def backend(qwen_mlx: InstalledModel):
    b = MlxBackend()
    b.load(qwen_mlx, LoadPlan(context=1024, threads=2, parallel=2, batch=256,
                                 unpack_weights=True))
    yield b
    b.unload()


def greedy(max_tokens: int, stop: tuple[str, ...] = ()) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=stop)


def chat(*turns: str, sampling: SamplingParams) -> GenerationRequest:
    roles = ("user", "assistant")
    return GenerationRequest(messages=tuple(Message(roles[i % 2], t)
                                            for i, t in enumerate(turns)), sampling=sampling)


def run(backend: MlxBackend, request: GenerationRequest) -> DoneEvent:
    events = list(backend.generate(request))
    assert isinstance(events[-1], DoneEvent), events[-1]
    return events[-1]


def test_converted_model_is_installed_as_an_mlx_directory(qwen_mlx, store):
    assert qwen_mlx.format == "mlx" and qwen_mlx.quant == "8bit" and qwen_mlx.chat
    assert qwen_mlx.path.is_dir() and qwen_mlx.architecture == "qwen2"
    config = json.loads((qwen_mlx.path / "config.json").read_text())
    assert config["quantization"] == {"group_size": 64, "bits": 8, "mode": "affine"}
    assert store.get(qwen_mlx.ref) == qwen_mlx


def test_teacher_forced_top1_agrees_with_llama_cpp_on_real_text(qwen, qwen_mlx):
    import mlx.core as mx
    from llama_cpp import Llama
    from mlx_lm.utils import load_model

    text = REAL_TEXT.read_text(encoding="utf-8")
    llm = Llama(str(qwen.path), n_ctx=AGREEMENT_TOKENS + 16, logits_all=True, verbose=False,
                n_threads=2)
    tokens = llm.tokenize(text.encode(), add_bos=False, special=True)[:AGREEMENT_TOKENS]
    assert len(tokens) == AGREEMENT_TOKENS
    llm.eval(tokens)
    reference = np.array(llm.scores[:AGREEMENT_TOKENS]).argmax(-1)
    llm.close()

    model, _ = load_model(qwen_mlx.path)
    model.set_dtype(mx.float32)  # as the backend runs on the CPU
    unpack_weights(model)
    logits = model(mx.array([tokens]))[0]
    ours = np.array(logits.argmax(-1))
    agreement = float((ours == reference).mean())
    assert agreement >= 0.95, f"top-1 agreement {agreement:.3f}"


def test_tokenizer_built_from_the_gguf_matches_llama_cpp(backend, runtime, qwen):
    text = "def f(x):\n    return x ** 2  # ünïcode ✓ <|im_start|>"
    assert backend.tokenize(text) == runtime.tokenize(qwen.ref, text)
    assert backend.detokenize(backend.tokenize(text)) == text
    assert backend.detokenize(backend.tokenize(text)) == runtime.detokenize(
        qwen.ref, [runtime.tokenize(qwen.ref, text)])[0]
    with pytest.raises(InvalidRequestError, match="token 1 is 10000000"):
        backend.detokenize([1, 10_000_000])


def test_greedy_chat_answer_writes_a_python_function(backend):
    done = run(backend, chat("Write a Python function add(a, b). Reply with code only.",
                             sampling=greedy(16)))
    assert "def add(a, b)" in done.text
    assert done.stats.completion_tokens <= 16 and done.stats.decode_tokens_per_s > 0
    assert done.stats.prompt_tokens > 20 and done.stats.ttft_s > 0


def test_batched_greedy_output_equals_single_output(backend):
    requests = [GenerationRequest(prompt="def add(a, b):", sampling=greedy(6)),
                GenerationRequest(prompt="The capital of France is", sampling=greedy(6))]
    single = [run(backend, r).text for r in requests]
    for i, r in enumerate(requests):
        backend.submit(f"s{i}", r)
    done: dict[str, str] = {}
    while backend.has_work():
        for sid, event in backend.step():
            if isinstance(event, DoneEvent):
                done[sid] = event.text
    assert [done["s0"], done["s1"]] == single
    assert "return" in single[0] and "Paris" in single[1]


def test_follow_up_turn_reuses_the_cached_prompt(backend):
    first = run(backend, chat("Name a prime number.", sampling=greedy(6)))
    follow = run(backend, chat("Name a prime number.", first.text, "And another one?",
                               sampling=greedy(4)))
    assert first.stats.cached_tokens < first.stats.prompt_tokens
    # everything up to the end of the first answer comes from the cache
    assert follow.stats.cached_tokens >= first.stats.prompt_tokens + first.stats.completion_tokens
    assert follow.stats.prompt_tokens - follow.stats.cached_tokens < 15


def test_stop_string_ends_the_answer_before_it(backend):
    done = run(backend, GenerationRequest(prompt="def add(a, b):",
                                          sampling=greedy(10, stop=("+",))))
    assert done.stats.finish_reason == "stop"
    assert "+" not in done.text and "return a" in done.text


def test_runtime_runs_an_mlx_model_on_the_mlx_backend(store, qwen_mlx):
    with Runtime(store=store) as rt:
        loaded = rt.load(qwen_mlx.ref, context=512)
        assert loaded.backend == "mlx" and "MLX" in loaded.plan.reason
        # OpenBLAS is installed with the tests (packaging/system_packages.sh)
        assert loaded.plan.unpack_weights and "for OpenBLAS" in loaded.plan.reason
        text, stats = rt.generate(qwen_mlx.ref, GenerationRequest(
            prompt="def fibonacci(n):", sampling=greedy(4))).result()
    assert stats.completion_tokens == 4 and text.strip()


def test_a_cancelled_request_ends_with_reason_cancelled(backend):
    import threading

    flag = threading.Event()
    backend.submit("c", GenerationRequest(prompt="def add(a, b):", sampling=greedy(50)), flag)
    flag.set()
    events = backend.step()
    assert [(sid, type(e).__name__) for sid, e in events] == [("c", "DoneEvent")]
    assert events[0][1].stats.finish_reason == "cancelled" and not backend.has_work()


def test_fail_all_ends_every_request_with_an_error(backend):
    backend.submit("a", GenerationRequest(prompt="x", sampling=greedy(5)))
    backend.submit("b", GenerationRequest(prompt="y", sampling=greedy(5)))
    events = backend.fail_all("boom")
    assert sorted(sid for sid, _ in events) == ["a", "b"]
    assert all(e.message == "boom" for _, e in events) and not backend.has_work()


def _link_weights(src: str, dst: str) -> None:
    if src.endswith(".safetensors"):
        with contextlib.suppress(OSError):  # another file system: copied instead
            os.link(src, dst)
            return
    shutil.copy2(src, dst)


@pytest.mark.parametrize("damage, message", [
    ("config", "no config.json"),
    ("weights", "no model\\*.safetensors"),
    ("tokenizer", "no tokenizer.json"),
    ("bad_json", "not valid JSON"),
])
def test_a_broken_model_directory_fails_to_load_with_a_specific_error(qwen_mlx, tmp_path,
                                                                      damage, message):
    broken = tmp_path / "model"
    # The weights (650 MB) as hard links: no damage below writes to them.
    shutil.copytree(qwen_mlx.path, broken, copy_function=_link_weights,
                    ignore=shutil.ignore_patterns("*.safetensors") if damage == "weights"
                    else None)
    if damage == "config":
        (broken / "config.json").unlink()
    elif damage == "tokenizer":
        (broken / "tokenizer.json").unlink()
    elif damage == "bad_json":
        (broken / "config.json").write_text("{not json")
    model = InstalledModel(**{**qwen_mlx.to_json(), "path": broken})
    with pytest.raises(ModelFileError, match=message):
        MlxBackend().load(model, LoadPlan(context=512, threads=2))


def test_the_mlx_backend_refuses_a_gguf_model_and_says_how_to_convert(qwen):
    with pytest.raises(ModelFileError, match="ember convert"):
        MlxBackend().load(qwen, LoadPlan(context=512, threads=2))


def test_converting_a_model_twice_is_refused(store, qwen, qwen_mlx):
    with pytest.raises(EmberError, match="already installed"):
        convert_to_mlx(qwen.ref, 8, store=store)
