"""Every family in models.yaml beyond Qwen's (tests/unit/test_format_hermes.py): its real
chat template renders tools, a call, its result and thinking the way it expects, and its
model's output, replayed token by token through a real vocabulary, parses into the same
events whichever way it is cut."""

import json
import re

import pytest

from backends.base import GenerationRequest, Message, Thinking, ToolCall, ToolCallEvent
from tests.support.families import chat
from tests.support.token_stream import TIME, WEATHER, replay

CALL_ID = re.compile(r"^call_[A-Za-z0-9]{24}$")
TOOLS = (WEATHER, TIME)


def conversation(reasoning: str = "", calls: int = 1) -> tuple[Message, ...]:
    made = (ToolCall("call_p", "get_weather", '{"city": "Paris"}'),
            ToolCall("call_t", "get_time", "{}"))[:calls]
    results = (Message("tool", "18°C", tool_call_id="call_p"),
               Message("tool", "12:00", tool_call_id="call_t"))[:calls]
    return (Message("system", "Be brief."), Message("user", "Weather in Paris?"),
            Message("assistant", "", reasoning=reasoning, tool_calls=made), *results)


def render(name: str, messages=None, **kw) -> str:
    messages = messages or conversation()
    request = GenerationRequest(messages=messages, tools=TOOLS, **kw)
    return chat(name, "<s>", "</s>").render(messages, request)


def calls_of(done) -> list[tuple[str, dict]]:
    assert all(CALL_ID.match(c.id) for c in done.tool_calls)
    return [(c.name, json.loads(c.arguments)) for c in done.tool_calls]


def assert_every_cut_is_clean(name: str, vocab: str, output: str, markers: tuple[str, ...]):
    """Cut after every token: never a half call, never a marker in text or calls."""
    whole = replay(chat(name), vocab, output).done
    for cut in range(len(replay(chat(name), vocab, output).pieces) + 1):
        done = replay(chat(name), vocab, output, tokens=cut).done
        for call in done.tool_calls:
            assert call in whole.tool_calls or (call.name, json.loads(call.arguments)) in \
                calls_of(whole)
        for text in (done.text, done.reasoning, *(c.name for c in done.tool_calls),
                     *(c.arguments for c in done.tool_calls)):
            assert not any(m in text for m in markers), (cut, text)


# -- Llama 3.1 / 3.2 / 3.3 ----------------------------------------------------------------
LLAMA = ["meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct",
         "meta-llama-Llama-3.3-70B-Instruct"]


@pytest.mark.parametrize("name", LLAMA)
def test_llama3_renders_tools_in_the_user_turn_and_one_call_per_turn(name):
    assert chat(name).fmt.tools == "llama3"
    prompt = render(name, conversation(calls=2))
    assert "Environment: ipython" in prompt and '"name": "get_weather"' in prompt
    first = prompt.index('{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>')
    second = prompt.index('{"name": "get_time", "parameters": {}}<|eot_id|>')
    # each call is its own turn, followed by its own result
    assert first < prompt.index('ipython<|end_header_id|>\n\n"18°C"') < second
    assert prompt.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


@pytest.mark.parametrize("output", [
    '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
])
def test_llama3_call_forms_parse(output):
    done = replay(chat(LLAMA[0]), "llama-bpe", output).done
    assert calls_of(done) == [("get_weather", {"city": "Paris"})]
    assert done.text == "" and done.stats.finish_reason == "tool_calls"


def test_llama3_two_calls_unicode_and_cut_after_every_token():
    output = ('{"name": "get_weather", "parameters": {"city": "São Paulo {}\\"x\\""}}; '
              '{"name": "get_time", "parameters": {}}')
    done = replay(chat(LLAMA[0]), "llama-bpe", output).done
    assert calls_of(done) == [("get_weather", {"city": 'São Paulo {}"x"'}), ("get_time", {})]
    assert_every_cut_is_clean(LLAMA[0], "llama-bpe", output, ("<|python_tag|>",))


def test_llama3_answer_that_is_not_a_call_is_text():
    done = replay(chat(LLAMA[0]), "llama-bpe", "It is sunny in Paris.").done
    assert done.text == "It is sunny in Paris." and not done.tool_calls


# -- Mistral Nemo and 7B v0.3 ---------------------------------------------------------------
MISTRAL = ["mistralai-Mistral-Nemo-Instruct-2407", "mistralai-Mistral-7B-Instruct-v0.3"]


@pytest.mark.parametrize("name", MISTRAL)
def test_mistral_gets_nine_character_ids_for_the_call_and_its_result(name):
    prompt = render(name)
    assert chat(name).fmt.tools == "mistral" and "[AVAILABLE_TOOLS]" in prompt
    ids = re.findall(r'"id": "([A-Za-z0-9]+)"', prompt)
    result_ids = re.findall(r'"call_id": "([A-Za-z0-9]+)"', prompt)
    assert len(ids) == 1 and len(ids[0]) == 9 and result_ids == ids
    assert '"arguments": {"city": "Paris"}' in prompt


@pytest.mark.parametrize("name", MISTRAL)
def test_mistral_parallel_calls_with_ids_parse_and_every_cut_is_clean(name):
    output = ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "[TOOL_CALLS] ]}"}, '
              '"id": "abcdefghi"}, {"name": "get_time", "arguments": {}, "id": "bcdefghij"}]')
    done = replay(chat(name), "llama-spm", output).done
    assert calls_of(done) == [("get_weather", {"city": "[TOOL_CALLS] ]}"}), ("get_time", {})]
    assert done.text == ""
    assert_every_cut_is_clean(name, "llama-spm", output.replace("[TOOL_CALLS] ]}", "Nice"),
                              ("[TOOL_CALLS]",))


# -- Phi-4-mini -----------------------------------------------------------------------------
PHI4 = "microsoft-Phi-4-mini-instruct"


def test_phi4_gets_its_tools_in_the_system_message_field():
    prompt = render(PHI4, (Message("user", "Weather in Paris?"),))
    assert chat(PHI4).fmt.tools == "phi4"
    listed = prompt.split("<|tool|>")[1].split("<|/tool|>")[0]
    assert [t["name"] for t in json.loads(listed)] == ["get_weather", "get_time"]
    assert prompt.startswith("<|system|><|tool|>") and prompt.endswith("<|assistant|>")


def test_phi4_calls_parse_and_every_cut_is_clean():
    output = ('<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
              '{"name": "get_time", "arguments": {}}]<|/tool_call|>')
    done = replay(chat(PHI4), "llama-bpe", output).done
    assert calls_of(done) == [("get_weather", {"city": "Paris"}), ("get_time", {})]
    assert_every_cut_is_clean(PHI4, "llama-bpe", output, ("<|tool_call|>", "<|/tool_call|>"))


# -- gpt-oss (harmony) ----------------------------------------------------------------------
GPT_OSS = "openai-gpt-oss-120b"
HARMONY = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>",
           "<|constrain|>")


def test_gpt_oss_renders_effort_tools_earlier_thinking_and_results():
    fmt = chat(GPT_OSS).fmt
    assert fmt.harmony and fmt.thinking_effort and "<|channel|>" in fmt.special_markers
    prompt = render(GPT_OSS, conversation(reasoning="Need the weather.", calls=2),
                    thinking=Thinking(effort="high"))
    assert "Reasoning: high" in prompt and "type get_weather = (_: {\ncity: string,\n})" in prompt
    assert ("<|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|>"
            "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
            '{"city": "Paris"}<|call|>'
            '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>'
            '"18°C"<|end|>'
            "<|start|>assistant to=functions.get_time") in prompt
    assert prompt.endswith("<|start|>assistant")
    off = render(GPT_OSS, thinking=Thinking(enabled=False))
    assert "Reasoning: low" in off  # gpt-oss cannot stop thinking: the least of it


def test_gpt_oss_thinks_then_calls_and_every_cut_is_clean():
    output = ("<|channel|>analysis<|message|>User wants weather. Use get_weather.<|end|>"
              "<|start|>assistant<|channel|>commentary to=functions.get_weather "
              '<|constrain|>json<|message|>{"city": "Paris <|call|> }"}<|call|>')
    run = replay(chat(GPT_OSS), "llama-bpe", output)
    done = run.done
    assert done.reasoning == "User wants weather. Use get_weather."
    assert calls_of(done) == [("get_weather", {"city": "Paris <|call|> }"})]
    assert done.text == "" and done.stats.finish_reason == "tool_calls"
    assert 0 < done.stats.reasoning_tokens < done.stats.completion_tokens
    assert_every_cut_is_clean(GPT_OSS, "llama-bpe", output.replace(" <|call|> }", ""), HARMONY)


def test_gpt_oss_final_channel_is_the_answer_and_recipient_may_come_first():
    answer = replay(chat(GPT_OSS), "llama-bpe",
                    "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant"
                    "<|channel|>final<|message|>Bonjour, 世界!<|return|>").done
    assert (answer.reasoning, answer.text) == ("Easy.", "Bonjour, 世界!")
    call = replay(chat(GPT_OSS), "llama-bpe",
                  " to=functions.get_time<|channel|>commentary json<|message|>{}<|call|>").done
    assert calls_of(call) == [("get_time", {})]


# -- DeepSeek-R1-Distill (forced-open thinking) ---------------------------------------------
R1 = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"


def test_r1_distill_output_starts_inside_thinking_when_the_prompt_opens_it():
    req = GenerationRequest(messages=(Message("user", "2+2?"),),
                            thinking=Thinking(enabled=True))
    r1 = chat(R1)
    assert r1.render(req.messages, req).endswith("<｜Assistant｜><think>\n")
    done = replay(r1, "qwen2", "Two plus two is four.\n</think>\n\n**4**", request=req).done
    assert (done.reasoning, done.text) == ("Two plus two is four.", "**4**")


def test_r1_distill_without_a_switch_gets_thinking_closed_by_ember():
    no_switch = chat(R1).source.replace(
        "{% if not enable_thinking %}{{- '</think>' -}}{% endif %}", "")
    from backends.chat_format.render import ChatTemplate

    r1 = ChatTemplate(no_switch)
    assert not r1.fmt.thinking_toggle
    req = GenerationRequest(messages=(Message("user", "2+2?"),), thinking=Thinking(enabled=False))
    prompt = r1.render(req.messages, req)
    assert prompt.endswith("<think>\n\n</think>\n\n")
    done = replay(r1, "qwen2", "4", request=req).done
    assert (done.reasoning, done.text) == ("", "4")


# -- SmolLM3 and Gemma 3 (no tool support in the template: generic) -------------------------
@pytest.mark.parametrize("name,vocab", [("HuggingFaceTB-SmolLM3-3B", "llama-bpe"),
                                        ("google-gemma-3-it", "gemma-4"),
                                        ("microsoft-Phi-3.5-mini-instruct", "phi-3")])
def test_templates_without_tools_get_them_from_ember_in_the_generic_format(name, vocab):
    template = chat(name)
    assert template.fmt.tools == "generic" and not template.fmt.native_tools
    prompt = render(name, conversation(calls=2))
    assert "[TOOL_REQUEST]" in prompt and '"name": "get_weather"' in prompt
    assert ('[TOOL_REQUEST]{"name": "get_time", "arguments": {}}[END_TOOL_REQUEST]' in prompt)
    assert "Result of get_weather: 18°C" in prompt and "Result of get_time: 12:00" in prompt
    output = ('[TOOL_REQUEST]{"name": "get_weather", "arguments": {"city": "Kraków"}}'
              '[END_TOOL_REQUEST]\n[TOOL_REQUEST]{"name": "get_time", "arguments": {}}'
              "[END_TOOL_REQUEST]")
    done = replay(template, vocab, output).done
    assert calls_of(done) == [("get_weather", {"city": "Kraków"}), ("get_time", {})]
    assert_every_cut_is_clean(name, vocab, output, ("[TOOL_REQUEST]", "[END_TOOL_REQUEST]"))


def test_smollm3_thinks_in_think_tags_and_switches_off():
    name = "HuggingFaceTB-SmolLM3-3B"
    assert chat(name).fmt.thinking is not None and chat(name).fmt.thinking_toggle
    off = render(name, (Message("user", "hi"),), thinking=Thinking(enabled=False))
    assert "Reasoning Mode: /no_think" in off and off.endswith("<think>\n\n</think>\n")
    req = GenerationRequest(messages=(Message("user", "hi"),))
    done = replay(chat(name), "llama-bpe", "<think>\nA greeting.\n</think>\nHello!",
                  request=req).done
    assert (done.reasoning, done.text) == ("A greeting.", "Hello!")


def test_a_streamed_call_carries_its_id_and_name_once():
    run = replay(chat(LLAMA[0]), "llama-bpe", '{"name": "get_time", "parameters": {}}')
    events = [e for e in run.streamed if isinstance(e, ToolCallEvent)]
    assert [bool(e.name) for e in events] == [True] + [False] * (len(events) - 1)


def test_a_control_token_marker_is_shown_as_text_and_other_control_tokens_stay_hidden():
    """Phi-3's <|end|> is a control token: plain detokenizing hides it, as backends do for
    every control token; named as a format marker it comes out as its text."""
    from backends.chat_format.markers import TOKEN_END, TOKEN_START, marker_pieces
    from tests.support.token_stream import load_vocab

    phi3 = load_vocab("phi-3")
    end, user = phi3.tokenize("<|end|>"), phi3.tokenize("<|user|>")
    assert len(end) == len(user) == 1
    assert phi3.piece(end[0]) == b"" and phi3.piece(user[0]) == b""
    shown = marker_pieces(("<|end|>", "<not one token>"), phi3.tokenize)
    assert shown == {end[0]: f"{TOKEN_START}<|end|>{TOKEN_END}".encode()}
