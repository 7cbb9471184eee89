"""Qwen2.5-Coder's own chat template, as its GGUF carries it."""

from app.gguf_file import read_gguf
from backends.chat_template import render_chat


def test_qwen_template_frames_system_user_and_generation_prompt(qwen):
    template = read_gguf(qwen.path).chat_template
    text = render_chat(template, [{"role": "system", "content": "Be terse."},
                                  {"role": "user", "content": "hi"}])
    assert text == ("<|im_start|>system\nBe terse.<|im_end|>\n"
                    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_qwen_template_adds_its_default_system_prompt(qwen):
    template = read_gguf(qwen.path).chat_template
    text = render_chat(template, [{"role": "user", "content": "hi"}])
    assert text.startswith("<|im_start|>system\nYou are Qwen")


def test_qwen_template_is_hermes_and_renders_the_offered_tools(qwen):
    from backends.base import GenerationRequest, Message, Tool
    from backends.chat_format.render import ChatTemplate

    chat = ChatTemplate(read_gguf(qwen.path).chat_template)
    assert chat.fmt.tools == "hermes" and chat.fmt.native_tools and chat.fmt.thinking is None
    tool = Tool("get_weather", "The weather in a city",
                {"type": "object", "properties": {"city": {"type": "string"}}})
    messages = (Message("user", "Weather in Paris?"),)
    prompt = chat.render(messages, GenerationRequest(messages=messages, tools=(tool,)))
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in prompt
    assert "<tool_call>" in prompt and prompt.endswith("<|im_start|>assistant\n")


def test_qwen_tool_call_token_reaches_the_parser_and_becomes_a_call(qwen):
    """<tool_call> is one token of Qwen's vocabulary: the backend shows it as text (and still
    hides <|im_end|>). Greedy, the 0.5B answers a weather question with a ```json fenced call
    object instead of <tool_call>, which the Hermes parser takes as the call it is."""
    from backends.base import GenerationRequest, LoadPlan, Message, SamplingParams, Tool
    from backends.llamacpp.backend import LlamaCppBackend
    from backends.prompt import run_alone

    backend = LlamaCppBackend()
    backend.load(qwen, LoadPlan(context=2048, threads=2))
    try:
        call_token = backend.tokenize("<tool_call>")
        assert len(call_token) == 1  # shown as its text, marked as the token it was
        assert backend._piece(call_token[0]) == "\ue000<tool_call>\ue001".encode()
        assert backend._piece(backend.tokenize("<|im_end|>")[0]) == b""
        tool = Tool("get_weather", "Get the current weather in a city",
                    {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]})
        request = GenerationRequest(
            messages=(Message("user", "What's the weather in Paris right now?"),),
            tools=(tool,), sampling=SamplingParams(temperature=0.0, max_tokens=48))
        done = list(run_alone(backend, request))[-1]
    finally:
        backend.unload()
    assert done.stats.finish_reason == "tool_calls", done
    assert [c.name for c in done.tool_calls] == ["get_weather"]
    assert "paris" in done.tool_calls[0].arguments.lower()
    assert "<tool_call>" not in done.text and "</tool_call>" not in done.text
