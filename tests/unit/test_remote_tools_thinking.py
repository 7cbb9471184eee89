"""The remote backend speaks tools and thinking with an OpenAI-compatible upstream (the fake
of tests/support/fake_openai.py streams them the way vLLM and llama-server do): what goes up
in the request, and the reasoning and tool-call deltas mapped back to Ember's events."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config import Paths
from app.runtime import Runtime, endpoints
from app.runtime.thinking import remote_support, support_of, thinking_for
from app.store import Store
from backends.base import (
    DoneEvent,
    GenerationRequest,
    Message,
    ReasoningEvent,
    SamplingParams,
    Thinking,
    TokenEvent,
    Tool,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
)
from backends.chat_format import ChatFormat, ThinkingMarkers
from backends.remote import Endpoint, RemoteBackend
from tests.support.fake_openai import ANSWER, CALLS, THINKING, fake_server

WEATHER = Tool("get_weather", "The weather in a city",
               {"type": "object", "properties": {"city": {"type": "string"},
                                                 "unit": {"type": "string"}},
                "required": ["city"]})
TIME = Tool("get_time", "", {"type": "object", "properties": {"zone": {"type": "string"}}})


def ask(text: str = "Hi", **kw) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", text),),
                             sampling=SamplingParams(temperature=0, max_tokens=64), **kw)


@pytest.fixture(scope="module")
def requests() -> list[dict]:
    return []


@pytest.fixture(scope="module")
def fake(requests: list[dict]) -> Iterator[str]:
    with fake_server(requests=requests) as url:
        yield url


@pytest.fixture
def remote(fake: str) -> Iterator[RemoteBackend]:
    backend = RemoteBackend(Endpoint("fake", fake))
    yield backend
    backend.close()


@pytest.mark.parametrize("model", ["think", "reason"])
def test_reasoning_deltas_become_reasoning_events_before_the_answer(remote, model):
    events = list(remote.generate(model, ask()))
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["ReasoningEvent"] * 4 + ["TokenEvent"] * 3 + ["DoneEvent"]
    assert [e.text for e in events if isinstance(e, ReasoningEvent)] == list(THINKING)
    done = events[-1]
    assert done.reasoning == "The user greets me; I should greet back."
    assert done.text == "Hello there!" and "greet" not in done.text
    assert done.stats.reasoning_tokens == 4 and done.stats.completion_tokens == 7
    assert done.stats.finish_reason == "stop"


def test_tool_call_fragments_become_tool_call_events_and_whole_calls_at_the_end(remote):
    events = list(remote.generate("tool", ask("Weather and time in Paris?",
                                              tools=(WEATHER, TIME))))
    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    assert calls[0] == ToolCallEvent(0, "", "call_ab12", "get_weather")
    assert [(c.index, c.id, c.name) for c in calls[1:4]] == [(0, "", "")] * 3
    assert calls[4] == ToolCallEvent(1, "", "call_cd34", "get_time")
    assert "".join(c.arguments for c in calls if c.index == 0) == "".join(CALLS[0][2])
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.stats.finish_reason == "tool_calls"
    assert done.tool_calls == (
        ToolCall("call_ab12", "get_weather", '{"city": "Paris", "unit": "°C"}'),
        ToolCall("call_cd34", "get_time", '{"zone": "Europe/Paris"}'))
    assert json.loads(done.tool_calls[0].arguments) == {"city": "Paris", "unit": "°C"}
    assert done.text == "" and done.reasoning == "".join(THINKING)


@pytest.mark.parametrize("model", ["think", "reason", "tool"])
def test_a_non_streamed_answer_equals_the_streamed_one(remote, model):
    request = ask(tools=(WEATHER, TIME))
    streamed = list(remote.generate(model, request))[-1]
    whole = list(remote.generate(model, request, stream=False))
    done = whole[-1]
    assert isinstance(done, DoneEvent)
    assert (done.text, done.reasoning, done.tool_calls, done.stats.finish_reason) == (
        streamed.text, streamed.reasoning, streamed.tool_calls, streamed.stats.finish_reason)
    assert done.stats.reasoning_tokens == streamed.stats.reasoning_tokens
    # the events of the whole answer add up to its DoneEvent, as a stream's do
    assert "".join(e.text for e in whole if isinstance(e, TokenEvent)) == done.text


def test_tools_tool_choice_and_thinking_settings_go_upstream(remote, requests):
    request = ask("Weather?", tools=(WEATHER, TIME),
                  tool_choice=ToolChoice("function", "get_weather"),
                  parallel_tool_calls=False, thinking=Thinking(True, "low"))
    list(remote.generate("tool", request))
    body = requests[-1]
    assert body["tools"] == [
        {"type": "function", "function": {"name": "get_weather",
                                          "description": "The weather in a city",
                                          "parameters": WEATHER.parameters}},
        {"type": "function", "function": {"name": "get_time", "description": "",
                                          "parameters": TIME.parameters}}]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert body["parallel_tool_calls"] is False
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert body["reasoning_effort"] == "low"
    list(remote.generate("ok", ask()))
    plain = requests[-1]  # no tools, default thinking: the request a server always saw
    assert not {"tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs",
                "reasoning_effort"} & set(plain)
    list(remote.generate("tool", ask(tools=(WEATHER,), tool_choice=ToolChoice("required"))))
    assert requests[-1]["tool_choice"] == "required"
    assert requests[-1]["parallel_tool_calls"] is True


def test_thinking_off_reaches_the_template_and_the_model_answers_without_thinking(
        remote, requests):
    events = list(remote.generate("think", ask(thinking=Thinking(False))))
    assert requests[-1]["chat_template_kwargs"] == {"enable_thinking": False}
    assert "reasoning_effort" not in requests[-1]
    assert not any(isinstance(e, ReasoningEvent) for e in events)
    assert events[-1].reasoning == "" and events[-1].text == "".join(ANSWER)


def test_the_conversations_calls_results_and_reasoning_go_back_upstream(remote, requests):
    call = ToolCall("call_ab12", "get_weather", '{"city": "Paris"}')
    messages = (Message("user", "Weather in Paris?"),
                Message("assistant", "", reasoning="I need the weather tool.",
                        tool_calls=(call,)),
                Message("tool", "18°C", tool_call_id="call_ab12", name="get_weather"),
                Message("assistant", "It is 18°C.", reasoning="The tool said 18."),
                Message("user", "Thanks!"))
    list(remote.generate("think", GenerationRequest(messages=messages, tools=(WEATHER,))))
    sent = requests[-1]["messages"]
    assert sent[1] == {"role": "assistant", "content": None,
                       "reasoning_content": "I need the weather tool.",
                       "tool_calls": [{"id": "call_ab12", "type": "function",
                                       "function": {"name": "get_weather",
                                                    "arguments": '{"city": "Paris"}'}}]}
    assert sent[2] == {"role": "tool", "content": "18°C", "tool_call_id": "call_ab12"}
    assert sent[3] == {"role": "assistant", "content": "It is 18°C.",
                       "reasoning_content": "The tool said 18."}
    assert sent[4] == {"role": "user", "content": "Thanks!"}


def test_cancelling_while_the_model_thinks_keeps_the_thinking_so_far(tmp_path: Path):
    gate = threading.Event()  # the fake thinks, then waits here before answering
    with fake_server(gate=gate) as url:
        paths = Paths(tmp_path / "home")
        endpoints.add("fake", url, paths=paths)
        with Runtime(store=Store(paths)) as rt:
            generation = rt.generate("fake/think", ask())
            events = iter(generation)
            seen = [next(events) for _ in THINKING]
            assert all(isinstance(e, ReasoningEvent) for e in seen)
            generation.cancel()
            rest = list(events)
            gate.set()
    done = rest[-1]
    assert isinstance(done, DoneEvent) and done.stats.finish_reason == "cancelled"
    assert done.reasoning == "".join(THINKING) and done.text == ""


# -- what the window's Think control offers ------------------------------------------------
def test_the_think_control_follows_the_models_chat_format():
    markers = ThinkingMarkers("<think>", "</think>")
    assert support_of(ChatFormat()).settings == ()  # Qwen2.5: no control
    assert support_of(ChatFormat(thinking=markers)).settings == ("on",)  # R1-Distill
    assert support_of(ChatFormat(thinking=markers, thinking_toggle=True)).settings == (
        "on", "off")  # Qwen3, SmolLM3
    assert support_of(ChatFormat(harmony=True, thinking_effort=True)).settings == (
        "medium", "low", "high")  # gpt-oss: levels, never off
    assert support_of(ChatFormat(thinking_toggle=True)).settings == ()  # nothing to mark it
    assert thinking_for(None) == Thinking()
    assert thinking_for("off") == Thinking(enabled=False)
    assert thinking_for("on") == Thinking(enabled=True)
    assert thinking_for("high") == Thinking(enabled=True, effort="high")


def test_a_remote_models_thinking_comes_from_its_server_or_from_its_answers(tmp_path, fake):
    paths = Paths(tmp_path / "home")
    endpoints.add("fake", fake, paths=paths)
    with Runtime(store=Store(paths)) as rt:
        assert rt.thinking_support("fake/think").settings == ("on", "off")
        assert rt.thinking_support("fake/ok").settings == ()
    # a server that describes nothing (vLLM): known once it has streamed some thinking
    assert remote_support(None, None, seen_thinking=False).settings == ()
    assert remote_support(None, None, seen_thinking=True).settings == ("on", "off")
    assert remote_support(["completion"], None, seen_thinking=False).settings == ()


def test_a_local_models_think_control_comes_from_its_own_template(tmp_path, monkeypatch):
    from app.runtime import thinking

    folder = tmp_path / "qwen3-mlx"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "old"}))
    assert thinking.template_of(folder, "mlx") == "old"
    (folder / "chat_template.jinja").write_text("{% if enable_thinking %}<think>{% endif %}")
    assert thinking.template_of(folder, "mlx").startswith("{% if enable_thinking")
    seen: list[str | None] = []

    def detect(template: str | None) -> ChatFormat:  # the formats branch's detection
        seen.append(template)
        return ChatFormat(thinking=ThinkingMarkers("<think>", "</think>"),
                          thinking_toggle="enable_thinking" in (template or ""))
    monkeypatch.setattr(thinking, "detect_format", detect)
    assert thinking.local_support(folder, "mlx").settings == ("on", "off")
    assert seen == [(folder / "chat_template.jinja").read_text()]
