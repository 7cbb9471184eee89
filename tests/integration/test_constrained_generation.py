"""Constrained decoding on real models: forced tool calls and JSON schemas on the llama.cpp,
cuda (on the CPU) and MLX backends, each answer a call of the offered tool whose arguments
validate against its schema; speculative decoding under a grammar gives the plain answer."""

from __future__ import annotations

import json

import jsonschema
import pytest

from backends.base import (
    DoneEvent,
    GenerationRequest,
    LoadPlan,
    Message,
    SamplingParams,
    SpeculativeParams,
    Thinking,
    Tool,
    ToolChoice,
)
from tests.support.tool_calls import tool_calls

FORECAST = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "number"},
        "place": {"type": "object", "properties": {"country": {"type": "string"}},
                  "required": ["country"]},
    },
    "required": ["city", "unit", "days", "place"],
}
WEATHER = Tool("get_weather", "Weather forecast for a city", FORECAST)
TIME = Tool("get_time", "The current time in a time zone",
            {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]})
QUESTION = "What will the weather be in Zürich, Switzerland over the next 3 days?"
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n)


def forced(choice: ToolChoice, n: int = 90, parallel: bool = True,
           **kw) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", QUESTION),), tools=(WEATHER, TIME),
                             tool_choice=choice, parallel_tool_calls=parallel,
                             sampling=greedy(n), **kw)


def run(backend, request: GenerationRequest) -> DoneEvent:
    done = list(backend.generate(request))[-1]
    assert isinstance(done, DoneEvent), done
    return done


def assert_calls(done: DoneEvent, name: str, schema: dict, count: int | None = None) -> None:
    calls = tool_calls(done)
    assert calls and all(n == name for n, _ in calls), done.text
    if count is not None:
        assert len(calls) == count
    for _, args in calls:
        jsonschema.validate(args, schema)


def assert_person(done: DoneEvent) -> None:
    jsonschema.validate(json.loads(done.text), PERSON)


PERSON_REQUEST = GenerationRequest(
    messages=(Message("user", "Invent a person. Reply in JSON."),), json_mode=True,
    json_schema=PERSON, sampling=greedy(40))


# -- llama.cpp ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llama(qwen):
    from backends.llamacpp.backend import LlamaCppBackend

    b = LlamaCppBackend()
    b.load(qwen, LoadPlan(context=2048, threads=2, parallel=2))
    yield b
    b.unload()


def test_llamacpp_required_call_validates_against_the_schema(llama):
    done = run(llama, forced(ToolChoice("required"), parallel=False))
    assert_calls(done, "get_weather", FORECAST, count=1)
    assert tool_calls(done)[0][1]["city"] == "Zürich"  # unicode survives


def test_llamacpp_named_choice_calls_that_tool_even_off_topic(llama):
    done = run(llama, forced(ToolChoice("function", "get_time"), n=40))
    assert_calls(done, "get_time", TIME.parameters, count=1)


def test_llamacpp_hermes_call_is_written_with_qwens_marker_token(llama, monkeypatch):
    assert llama.chat.fmt.tools == "hermes"  # detected from Qwen's own template
    seen: list[int] = []
    detokenize = llama.engine.detokenize

    def recording(token: int) -> bytes:
        seen.append(token)
        return detokenize(token)

    monkeypatch.setattr(llama.engine, "detokenize", recording)
    done = run(llama, forced(ToolChoice("required"), parallel=False))
    # the grammar writes <tool_call> as Qwen's single added token, as the model itself would
    assert seen[0] == llama.tokenize("<tool_call>")[0] == 151657
    assert done.text == ""  # the markers went to the parser, not into the answer
    assert_calls(done, "get_weather", FORECAST, count=1)


def test_llamacpp_forces_a_gemma_4_call_on_qwen(llama, monkeypatch):
    """Gemma 4's forced-call grammar on a real model: Qwen's 0.5B given Gemma 4's template
    (no Gemma 4 is small enough to run here), its markers text in Qwen's vocabulary. The
    call reads back as one of the named tool whose arguments validate: every required key,
    nested ones too."""
    from tests.support.families import chat

    ct = chat("google-gemma-4-31B-it")
    monkeypatch.setattr(llama, "chat", ct)
    monkeypatch.setattr(llama, "_markers", ct.use_marker_tokens(llama.tokenize_special))
    done = run(llama, forced(ToolChoice("function", "get_weather"), n=160))
    assert_calls(done, "get_weather", FORECAST, count=1)


def test_llamacpp_forces_a_kimi_k3_call_on_qwen_with_thinking_off(llama, monkeypatch):
    """Kimi K3's forced-call grammar on a real model, the same way (its markers text in
    Qwen's vocabulary): with thinking switched off through K3's own `thinking` variable the
    prompt opens the response, and the grammar's call reads back, validated."""
    from tests.support.families import chat

    ct = chat("Kimi-K3")
    monkeypatch.setattr(llama, "chat", ct)
    monkeypatch.setattr(llama, "_markers", ct.use_marker_tokens(llama.tokenize_special))
    done = run(llama, forced(ToolChoice("function", "get_weather"), n=160,
                             thinking=Thinking(enabled=False)))
    assert_calls(done, "get_weather", FORECAST, count=1)


def test_llamacpp_json_schema_and_json_mode(llama):
    assert_person(run(llama, PERSON_REQUEST))
    done = run(llama, GenerationRequest(
        messages=(Message("user", "Describe a cat as JSON."),), json_mode=True,
        sampling=SamplingParams(temperature=0.9, seed=5, max_tokens=60)))
    assert done.stats.finish_reason == "length" or isinstance(json.loads(done.text), dict)
    assert done.text.lstrip().startswith("{")


def test_llamacpp_speculation_under_a_grammar_gives_the_plain_answer(llama, qwen):
    choice = ToolChoice("function", "get_time")
    plain = run(llama, forced(choice, n=30))
    lookup = run(llama, forced(choice, n=30, speculative=SpeculativeParams(
        method="lookup", adaptive=False)))
    draft = run(llama, forced(choice, n=30, speculative=SpeculativeParams(
        draft_model="self", draft_path=str(qwen.path), max_draft=4, adaptive=False)))
    assert lookup.text == draft.text == plain.text
    # the model drafting for itself: every proposal the grammar allows is accepted
    assert draft.stats.accepted_tokens > 5


def test_llamacpp_grammar_leaves_a_batched_neighbour_alone(llama):
    free = GenerationRequest(messages=(Message("user", "Say hello in French."),),
                             sampling=greedy(12))
    alone = run(llama, free)
    llama.submit("free", free)
    llama.submit("forced", PERSON_REQUEST)
    done: dict[str, DoneEvent] = {}
    while len(done) < 2:
        for sid, event in llama.step():
            if isinstance(event, DoneEvent):
                done[sid] = event
    assert done["free"].text == alone.text
    assert_person(done["forced"])


# -- cuda, on the CPU -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def cuda(qwen):
    from backends.cuda import CudaBackend

    b = CudaBackend(max_seqs=2, adaptive_speculation=False)
    b.load(qwen, LoadPlan(context=1024, threads=2, parallel=2, batch=256))
    yield b
    b.unload()


def test_cuda_forced_call_and_schema(cuda):
    done = run(cuda, forced(ToolChoice("function", "get_weather")))
    assert_calls(done, "get_weather", FORECAST, count=1)
    assert_person(run(cuda, PERSON_REQUEST))


def test_cuda_lookup_speculation_under_a_grammar_gives_the_plain_answer(cuda):
    request = forced(ToolChoice("function", "get_time"), n=30)
    plain = run(cuda, request)
    spec = run(cuda, forced(ToolChoice("function", "get_time"), n=30,
                            speculative=SpeculativeParams(method="lookup")))
    assert spec.text == plain.text
    assert_calls(spec, "get_time", TIME.parameters, count=1)


# -- MLX (about a token a second on this CPU: one short call) --------------------------------
def test_mlx_named_call_and_json_mode(qwen_mlx):
    from backends.mlx.backend import MlxBackend

    b = MlxBackend()
    b.load(qwen_mlx, LoadPlan(context=512, threads=2, parallel=1, batch=256,
                              unpack_weights=True))
    try:
        zone = Tool("get_time", "The time", {"type": "object", "properties": {
            "zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]})
        done = run(b, GenerationRequest(messages=(Message("user", "Time in Paris?"),),
                                        tools=(zone,), tool_choice=ToolChoice("required"),
                                        parallel_tool_calls=False, sampling=greedy(24)))
        assert_calls(done, "get_time", zone.parameters, count=1)
        small = {"type": "object", "properties": {"ok": {"type": "boolean"}},
                 "required": ["ok"], "additionalProperties": False}
        done = run(b, GenerationRequest(prompt="Is water wet? JSON:", json_mode=True,
                                        json_schema=small, sampling=greedy(8)))
        jsonschema.validate(json.loads(done.text), small)
    finally:
        b.unload()
