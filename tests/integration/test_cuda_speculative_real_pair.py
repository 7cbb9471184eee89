"""Speculative decoding in the cuda backend on the real pair: Qwen2.5-Coder-1.5B-Instruct
verifies what Qwen2.5-Coder-0.5B-Instruct (or prompt lookup) proposes, in float32 on the
CPU. Greedy answers must be the 1.5B's own, token for token. Short answers: the 1.5B in
float32 takes about a second a token on the 2-core CI machine."""

from __future__ import annotations

import pytest

from backends.base import (
    DoneEvent,
    GenerationRequest,
    LoadPlan,
    Message,
    SamplingParams,
    SpeculativeParams,
)
from backends.cuda import CudaBackend
from backends.errors import InvalidRequestError
from backends.llamacpp import LlamaCppBackend
from tests.support.logprobs import TOLERANCE, check_against_scoring, generate, teacher_forced

pytestmark = pytest.mark.slow
MAX_TOKENS = 24
# An editing request: the answer repeats the code, so prompt lookup finds what comes next.
EDIT = ("Repeat this code with one change: rename `total` to `acc`.\n\n```python\n"
        "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
        "    return total / len(values)\n```")


@pytest.fixture(scope="module")
def qwen15_cuda(qwen15) -> CudaBackend:
    # adaptive off: propose max_draft every step, so the verification is what is tested
    # (on this CPU the cost model would rightly switch the draft model off)
    backend = CudaBackend(max_seqs=2, adaptive_speculation=False)
    backend.load(qwen15, LoadPlan(context=1024, threads=2, parallel=2, batch=256))
    yield backend
    backend.unload()


def edit_request(spec: SpeculativeParams | None, logprobs: int | None = None
                 ) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", EDIT),),
                             sampling=SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS),
                             speculative=spec, logprobs=logprobs)


def answer(backend: CudaBackend, spec: SpeculativeParams | None) -> DoneEvent:
    events = list(backend.generate(edit_request(spec)))
    assert isinstance(events[-1], DoneEvent), events[-1]
    return events[-1]


@pytest.fixture(scope="module")
def plain(qwen15_cuda) -> DoneEvent:
    done = answer(qwen15_cuda, None)
    assert done.stats.completion_tokens == MAX_TOKENS and done.stats.draft_tokens == 0
    return done


def test_greedy_with_the_0_5b_draft_is_the_1_5b_greedy_answer_with_its_logprobs(
        qwen15_cuda, plain, qwen):
    """The answer is the 1.5B's own, and so are its logprobs (its verification rows, in
    float32 as close to its one-row scores as plain decoding), far from the 0.5B's scores
    of the same tokens. (One test for both: the 1.5B's answer is most of a minute here.)"""
    spec = SpeculativeParams(method="draft", draft_model=qwen.id, max_draft=4,
                             draft_path=str(qwen.path))
    request = edit_request(spec, logprobs=1)
    done = generate(qwen15_cuda, request)
    print(f"\ndraft: {done.stats.accepted_tokens}/{done.stats.draft_tokens} accepted, "
          f"{done.stats.decode_tokens_per_s} tokens/s (plain "
          f"{plain.stats.decode_tokens_per_s})")
    assert done.text == plain.text
    assert done.stats.completion_tokens == plain.stats.completion_tokens
    assert 0 < done.stats.accepted_tokens <= done.stats.draft_tokens
    check_against_scoring(done, teacher_forced(qwen15_cuda, request, done), n_top=1,
                          greedy=True)
    draft_model = LlamaCppBackend()  # the 0.5B's scores, from its GGUF file
    draft_model.load(qwen, LoadPlan(context=1024, threads=2))
    try:
        by_draft = teacher_forced(draft_model, request, done)
    finally:
        draft_model.unload()
    got = sum(e.logprob for e in done.logprobs)
    assert abs(got - sum(by_draft)) > 100 * TOLERANCE, (got, sum(by_draft))


def test_greedy_with_prompt_lookup_is_the_greedy_answer(qwen15_cuda, plain):
    done = answer(qwen15_cuda, SpeculativeParams(method="lookup", max_draft=6))
    print(f"\nlookup: {done.stats.accepted_tokens}/{done.stats.draft_tokens} accepted, "
          f"{done.stats.decode_tokens_per_s} tokens/s (plain "
          f"{plain.stats.decode_tokens_per_s})")
    assert done.text == plain.text
    assert 0 < done.stats.accepted_tokens <= done.stats.draft_tokens


def test_a_stop_string_inside_accepted_proposals_ends_the_answer_there(qwen15_cuda, plain):
    """Several tokens arrive in one step; the answer ends at the stop string all the same,
    and the tokens after it are not counted."""
    assert "+=" in plain.text
    request = GenerationRequest(messages=(Message("user", EDIT),),
                                sampling=SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS,
                                                        stop=("+=",)),
                                speculative=SpeculativeParams(method="lookup", max_draft=6))
    done = list(qwen15_cuda.generate(request))[-1]
    assert isinstance(done, DoneEvent) and done.stats.finish_reason == "stop"
    assert done.text == plain.text.split("+=")[0]
    assert done.stats.accepted_tokens > 0
    assert len(qwen15_cuda.tokenizer.tokenize(done.text)) <= done.stats.completion_tokens \
        < plain.stats.completion_tokens


def test_a_draft_with_another_vocabulary_is_refused_with_the_reason(qwen15_cuda, gemma):
    spec = SpeculativeParams(method="draft", draft_model=gemma.id, draft_path=str(gemma.path))
    request = GenerationRequest(prompt="def f(x):", speculative=spec)
    with pytest.raises(InvalidRequestError, match="another tokenizer.*262144 tokens against "
                                                  "the model's 151936"):
        qwen15_cuda.submit("s", request)
    assert not qwen15_cuda.has_work()
