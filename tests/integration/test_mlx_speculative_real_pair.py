"""Speculative decoding in the mlx backend, on the real pair: Qwen2.5-Coder-1.5B-Instruct
(target) and -0.5B-Instruct (draft), both converted to MLX at 8 bits (kept in the test home).
Prompt lookup needs no draft, so its tests run on the 0.5B alone.

mlx[cpu] on this 2-core machine is slow (about 2 s per token for the 1.5B when the machine is
shared, and a prompt token costs as much as a generated one: its quantized matmul gains
nothing from several rows), so prompts are raw and short and answers a few tokens; what
matters is that speculation changes nothing in them.
"""

from __future__ import annotations

import json
import threading

import pytest

from app.runtime import Runtime
from backends.base import (
    DoneEvent,
    GenerationRequest,
    LoadPlan,
    SamplingParams,
    SpeculativeParams,
)
from backends.errors import InvalidRequestError
from backends.mlx.backend import MlxBackend
from tests.support.logprobs import TOLERANCE, check_against_scoring, teacher_forced

LOOKUP = SpeculativeParams(method="lookup", max_draft=3)
REPEATS = "a = [1, 2, 3]\nb = [1, 2,"  # lookup finds " 3]" and what follows in the prompt


@pytest.fixture(scope="module")
def target(qwen15_mlx):
    b = MlxBackend()
    b.load(qwen15_mlx, LoadPlan(context=256, threads=2, parallel=1, batch=64,
                                unpack_weights=True))
    yield b
    b.unload()


@pytest.fixture(scope="module")
def small(qwen_mlx):
    b = MlxBackend()
    b.load(qwen_mlx, LoadPlan(context=256, threads=2, parallel=2, batch=64,
                                unpack_weights=True))
    yield b
    b.unload()


def greedy(max_tokens: int, **kw: object) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)  # type: ignore[arg-type]


def draft(qwen_mlx, max_draft: int = 3) -> SpeculativeParams:
    return SpeculativeParams(method="draft", draft_model=qwen_mlx.ref, max_draft=max_draft,
                             draft_path=str(qwen_mlx.path))


def run(backend: MlxBackend, request: GenerationRequest) -> DoneEvent:
    *_, done = backend.generate(request)
    assert isinstance(done, DoneEvent), done
    return done


def test_greedy_answer_with_the_draft_model_is_the_targets_own_and_so_are_its_logprobs(
        target, small, qwen_mlx):
    """The 0.5B proposes for the 1.5B: the answer is the 1.5B's plain greedy one, and its
    logprobs are the 1.5B's own (its verification rows), far from the 0.5B's scores of the
    same tokens. (One test for both: a 1.5B generation on mlx[cpu] is most of a minute.)"""
    prompt = "def add(a, b):"
    plain = run(target, GenerationRequest(prompt=prompt, sampling=greedy(6)))
    request = GenerationRequest(prompt=prompt, sampling=greedy(6), logprobs=1,
                                speculative=draft(qwen_mlx))
    spec = run(target, request)
    assert spec.text == plain.text and "return" in plain.text
    assert spec.stats.completion_tokens == plain.stats.completion_tokens == 6
    assert 0 < spec.stats.accepted_tokens <= spec.stats.draft_tokens
    assert plain.stats.draft_tokens == plain.stats.accepted_tokens == 0
    check_against_scoring(spec, teacher_forced(target, request, spec), n_top=1, greedy=True)
    by_draft = teacher_forced(small, request, spec)
    got = sum(e.logprob for e in spec.logprobs)
    assert abs(got - sum(by_draft)) > 100 * TOLERANCE, (got, sum(by_draft))


def test_prompt_lookup_copies_from_the_prompt_and_changes_nothing(small):
    plain = run(small, GenerationRequest(prompt=REPEATS, sampling=greedy(5)))
    spec = run(small, GenerationRequest(prompt=REPEATS, sampling=greedy(5), speculative=LOOKUP))
    assert spec.text == plain.text
    assert spec.stats.accepted_tokens > 0


def test_verification_applies_the_repeat_penalty_position_by_position(small):
    # a logits processor makes each position depend on the tokens accepted before it
    sampling = greedy(5, repeat_penalty=1.5)
    plain = run(small, GenerationRequest(prompt=REPEATS, sampling=sampling))
    spec = run(small, GenerationRequest(prompt=REPEATS, sampling=sampling, speculative=LOOKUP))
    assert spec.text == plain.text and spec.stats.draft_tokens > 0


def test_a_speculative_request_runs_beside_a_batched_one(small):
    a = GenerationRequest(prompt="def add(a, b):", sampling=greedy(4))
    b = GenerationRequest(prompt=REPEATS, sampling=greedy(4), speculative=LOOKUP)
    alone = [run(small, a).text, run(small, b).text]
    small.submit("a", a)
    small.submit("b", b)
    done: dict[str, DoneEvent] = {}
    while small.has_work():
        done.update((sid, e) for sid, e in small.step() if isinstance(e, DoneEvent))
    assert [done["a"].text, done["b"].text] == alone
    assert done["b"].stats.draft_tokens > 0 and done["a"].stats.draft_tokens == 0
    # the speculative request's cache serves the next request with the same start
    again = run(small, GenerationRequest(prompt=REPEATS + " 3]", sampling=greedy(1)))
    assert again.stats.cached_tokens > 0


def test_a_cancelled_speculative_request_ends_cancelled(small):
    flag = threading.Event()
    small.submit("c", GenerationRequest(prompt="x = 1", sampling=greedy(50),
                                        speculative=LOOKUP), flag)
    events = small.step()
    flag.set()
    events += small.step()
    assert events[-1][0] == "c" and events[-1][1].stats.finish_reason == "cancelled"
    assert not small.has_work()


def test_a_draft_with_another_tokenizer_is_refused(target, qwen_mlx, tmp_path):
    other = tmp_path / "other-draft"
    other.mkdir()
    for f in qwen_mlx.path.iterdir():
        if f.name != "tokenizer.json":
            (other / f.name).symlink_to(f)
    spec = json.loads((qwen_mlx.path / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    vocab["a"], vocab["b"] = vocab["b"], vocab["a"]  # two tokens swap their ids
    (other / "tokenizer.json").write_text(json.dumps(spec))
    bad = SpeculativeParams(method="draft", draft_model="x", draft_path=str(other))
    with pytest.raises(InvalidRequestError, match="another tokenizer"):
        target.submit("t", GenerationRequest(prompt="x", sampling=greedy(2), speculative=bad))
    assert not target.has_work()


def test_the_runtime_runs_a_speculative_request_in_the_mlx_worker(store, qwen_mlx):
    with Runtime(store=store) as rt:
        rt.load(qwen_mlx.ref, context=256)
        text, stats = rt.generate(qwen_mlx.ref, GenerationRequest(
            prompt=REPEATS, sampling=greedy(3), speculative=LOOKUP)).result()
    assert stats.completion_tokens == 3 and stats.draft_tokens > 0 and text.startswith(" 3]")
