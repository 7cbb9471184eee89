"""A conversation's tool turns shaped the way a family's template reads them.

Hugging Face templates take OpenAI-like dicts, but each family insists on something of its
own: Mistral's ids are 9 letters and digits (its template raises otherwise), Llama 3's and
gpt-oss's templates take one call per assistant turn (and name a result after the call just
before it), gpt-oss refuses a tool-call turn with both content and thinking."""

from __future__ import annotations

import json

from backends.base import Message
from backends.chat_format.base import ChatFormat
from backends.chat_format.families import by_name


def template_messages(messages: tuple[Message, ...], fmt: ChatFormat) -> list[dict]:
    """Messages as Hugging Face chat templates read them: tool calls with their arguments as
    an object, reasoning as `reasoning_content` (Qwen3) and `thinking` (gpt-oss), a tool
    result with the name of the tool it answers."""
    messages = named_results(messages)
    if by_name(fmt.tools).one_call_per_turn:
        messages = one_call_per_turn(messages)
    out: list[dict] = []
    for m in messages:
        d: dict = {"role": m.role, "content": m.content}
        if m.reasoning:
            d["reasoning_content"] = d["thinking"] = m.reasoning
        if m.tool_calls:
            d["tool_calls"] = [{"id": call_id(c.id, fmt), "type": "function",
                                "function": {"name": c.name,
                                             "arguments": json.loads(c.arguments or "{}")}}
                               for c in m.tool_calls]
            if fmt.harmony and m.content and m.reasoning:
                # its template refuses both; the text before a call is commentary the model
                # wrote while working, so it joins the thinking
                d["thinking"] = f"{m.reasoning}\n\n{m.content}"
                d["content"] = ""
        if m.tool_call_id:
            d["tool_call_id"] = call_id(m.tool_call_id, fmt)
        if m.name:
            d["name"] = m.name
        out.append(d)
    return out


def call_id(given: str, fmt: ChatFormat) -> str:
    """A call's id as the family's template insists on it (Mistral's: 9 letters and
    digits), the same for the call and its result."""
    shaped = by_name(fmt.tools).call_id
    return shaped(given) if shaped is not None else given


def named_results(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """A tool result without a name takes the name of the call it answers."""
    names = {c.id: c.name for m in messages for c in m.tool_calls if c.id}
    return tuple(Message(m.role, m.content, m.reasoning, m.tool_calls, m.tool_call_id,
                         names.get(m.tool_call_id or "", m.name))
                 if m.role == "tool" and not m.name else m for m in messages)


def one_call_per_turn(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """An assistant turn with several calls becomes one turn per call, each followed by its
    own result (matched by id; results without a match keep their place)."""
    out: list[Message] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        if m.role != "assistant" or len(m.tool_calls) < 2:
            out.append(m)
            i += 1
            continue
        j = i + 1
        results: list[Message] = []
        while j < len(messages) and messages[j].role == "tool":
            results.append(messages[j])
            j += 1
        for k, call in enumerate(m.tool_calls):
            first = k == 0
            out.append(Message("assistant", m.content if first else "",
                               m.reasoning if first else "", (call,)))
            mine = [r for r in results if r.tool_call_id == call.id]
            out.extend(mine)
            results = [r for r in results if r not in mine]
        out.extend(results)
        i = j
    return tuple(out)
