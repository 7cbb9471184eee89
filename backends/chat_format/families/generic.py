"""Tool calls for a model whose chat template has none (Gemma 3, Phi-3.5, DeepSeek-R1-Distill,
SmolLM3's plain template): Ember describes the tools and the call format in the system prompt
itself, and writes earlier calls and results into the conversation as plain text in that
same format, which the template then renders as ordinary turns.

The format is LM Studio's default one, `[TOOL_REQUEST]{"name": .., "arguments": {..}}
[END_TOOL_REQUEST]`: plain-text markers any tokenizer can write, a JSON object our grammar can
force, and a shape models already meet in the wild."""

from __future__ import annotations

import json
from collections.abc import Sequence

from backends.base import Message, Tool
from backends.chat_format.call_grammar import CallGrammar, Markers, call_rules
from backends.chat_format.families.base import Family
from backends.chat_format.tagged import CallSyntax

OPEN, CLOSE = "[TOOL_REQUEST]", "[END_TOOL_REQUEST]"


def tools_prompt(tools: tuple[Tool, ...]) -> str:
    listed = "\n".join(json.dumps({"type": "function",
                                   "function": {"name": t.name, "description": t.description,
                                                "parameters": t.parameters}},
                                  ensure_ascii=False) for t in tools)
    return ("# Tools\n\nYou may call one or more of these functions to answer:\n"
            f"{listed}\n\n"
            "To call a function, reply with exactly this, one line per call, and nothing "
            f"else:\n{OPEN}{{\"name\": \"<function name>\", \"arguments\": {{<arguments as a "
            f"JSON object>}}}}{CLOSE}\n"
            "The results come back in the next message. If no function helps, answer "
            "directly.")


def call_text(name: str, arguments: str) -> str:
    args = json.loads(arguments or "{}")
    return f"{OPEN}{json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}{CLOSE}"


def plain_turns(messages: tuple[Message, ...], tools: tuple[Tool, ...]) -> tuple[Message, ...]:
    """The conversation as a template without tool support can take it: the tool list in the
    system prompt, calls as text in assistant turns, results as a user turn, and turns of one
    role next to each other merged (templates like Gemma's insist roles alternate)."""
    out: list[Message] = []
    if tools:
        if messages and messages[0].role == "system":
            out.append(Message("system", f"{messages[0].content}\n\n{tools_prompt(tools)}"))
            messages = messages[1:]
        else:
            out.append(Message("system", tools_prompt(tools)))
    for m in messages:
        if m.role == "assistant" and m.tool_calls:
            calls = "\n".join(call_text(c.name, c.arguments) for c in m.tool_calls)
            m = Message("assistant", f"{m.content}\n{calls}" if m.content else calls,
                        reasoning=m.reasoning)
        elif m.role == "tool":
            m = Message("user", f"Result of {m.name or 'the tool'}: {m.content}")
        if out and out[-1].role == m.role and m.role != "system":
            m = Message(m.role, f"{out[-1].content}\n\n{m.content}",
                        reasoning=out[-1].reasoning or m.reasoning)
            out[-1] = m
        else:
            out.append(m)
    return tuple(out)


# -- the family: what a template without tool support gets (never matched by its text: the
# registry gives it to a template that does not read `tools` and matches no family) -------
def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    _, rules = call_rules(tools)
    open_, close = m(OPEN), m(CLOSE)
    rules.append(f"rest: call {close}" + (' ("\\n" block)*' if parallel and tools else ""))
    rules.append(f"block: {open_} call {close}")
    rules.append(f"calls: {open_} rest")
    return CallGrammar(rules, OPEN)


def _never(template: str) -> bool:
    return False


FAMILY = Family(
    name="generic",
    matches=_never,
    json_calls=CallSyntax((OPEN,), CLOSE, bare_json=True),
    native_tools=False,
    history_as_text=plain_turns,
    grammar=grammar,
)
