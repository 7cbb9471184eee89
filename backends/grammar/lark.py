"""The grammar of an answer, as llguidance Lark text.

An answer is, after the thinking (when the model thinks in marked text):
- JSON mode: one JSON object; a JSON schema: a value of that schema;
- tool calls (`required`, or the named tool): one or more calls in the model's format
  (exactly one without parallel calls, or for the named tool) and nothing else;
- `auto` with tools: free text until the model opens a call (the format's trigger), then the
  rest of the call constrained, then another call or the end: llama-server's lazy grammar.

The call texts are each family's own (its `grammar`, backends.chat_format.families); a
marker that is one special token of the vocabulary is that token (`<[id]>`), other markers
are text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from backends.base import Tool
from backends.chat_format.base import ChatFormat
from backends.chat_format.call_grammar import (
    TOOL_JSON,
    CallGrammar,
    Markers,
    closed,
    json_rule,
    lit,
    regex_text,
)
from backends.chat_format.families import by_name
from backends.grammar.vocab import GrammarVocab

__all__ = ["TOOL_JSON", "Answer", "Markers", "closed", "grammar_text", "json_rule", "lit"]

# Answers in JSON mode may be pretty-printed, with whitespace runs bounded (llama.cpp's
# JSON_GBNF bounds them too) so a model cannot pad forever.
ANSWER_JSON = {"whitespace_pattern": "[ \\t\\n]{0,20}", "lenient": False}
ANY_OBJECT = {"type": "object"}

# Where the output starts relative to the thinking: "inside" (the prompt opened it, as
# DeepSeek-R1-Distill's template does), "after" (no thinking: it was closed or there is none),
# "maybe" (the model may open it itself, Qwen3).
ThinkingStart = Literal["inside", "after", "maybe"]


@dataclass(frozen=True)
class Answer:
    """What the answer must be: `json` (JSON mode; `schema` None is any object), and/or
    `tools` with their choice ("required", "function" or "auto")."""
    json: bool = False
    schema: dict | None = None
    tools: tuple[Tool, ...] = ()
    choice: Literal["auto", "required", "function"] = "auto"
    parallel: bool = True


def calls_grammar(fmt: ChatFormat, tools: tuple[Tool, ...], parallel: bool,
                  m: Markers) -> CallGrammar:
    """The rules of one or more calls in the family's format."""
    family = by_name(fmt.tools)
    if family.grammar is None:
        raise ValueError(f"the {family.name} tool-call format has no grammar to force "
                         "calls with; use tool_choice auto")
    return family.grammar(tools, parallel, m)


def answer_grammar(answer: Answer, fmt: ChatFormat, m: Markers) -> list[str]:
    """Rules defining `answer` (harmony: its messages before and including the answer)."""
    harmony = fmt.harmony
    rules: list[str] = []
    choices: list[str] = []
    if answer.json:
        rules.append("json_answer: " + json_rule(answer.schema or ANY_OBJECT, ANSWER_JSON))
        choices.append("json_answer")
    trigger, rest = "", ""
    if answer.tools:
        calls = calls_grammar(fmt, answer.tools, answer.parallel, m)
        rules += calls.rules
        trigger, rest = calls.trigger, calls.rest
        choices.append("calls")
    free = bool(answer.tools) and answer.choice == "auto" and not answer.json
    if harmony:
        return rules + harmony_answer(choices, free, m)
    if not free:
        return rules + ["answer: " + " | ".join(choices)]
    # auto: free text, then maybe calls, opened by the trigger
    rules.append("TEXT: /(.|\\n)*/")
    if trigger == "{":  # Llama 3: a call is the whole answer, which then starts with "{"
        rules.append("PLAIN: /([^{](.|\\n)*)?/")
        return rules + ["answer: PLAIN | calls"]
    if m.starts_special(trigger):  # text cannot hold the token: it ends where calls start
        return rules + ["answer: TEXT calls?"]
    # a text trigger: a lazy lexeme ends the text at the trigger's first occurrence
    pattern = "/(.|\\n)*" + regex_text(trigger) + "/"
    return rules + [f"head[lazy]: {pattern}", f"answer: head {rest} | TEXT"]


def harmony_answer(choices: list[str], free: bool, m: Markers) -> list[str]:
    """gpt-oss: messages on the analysis (thinking) or commentary channel, then the answer:
    a call, the final message (free, or the JSON answer)."""
    channel, message = m("<|channel|>"), m("<|message|>")
    rules = [
        "HTEXT: /(.|\\n)*/",
        f"note: {channel} (\"analysis\" | \"commentary\") {message} HTEXT {m('<|end|>')} "
        f"{m('<|start|>')} \"assistant\"",
    ]
    ends = []
    if "json_answer" in choices:
        ends.append(f"{channel} \"final\" {message} json_answer")
    elif free:
        ends.append(f"{channel} \"final\" {message} HTEXT")
    if "calls" in choices:
        ends.append("calls")
    return rules + ["answer: note* (" + " | ".join(ends) + ")"]


def thinking_rules(fmt: ChatFormat, start: ThinkingStart, m: Markers) -> list[str]:
    """`start`, with the thinking before the answer where the output may have it."""
    markers = fmt.thinking
    if markers is None or fmt.harmony or start == "after":
        return ["start: answer"]
    if m.starts_special(markers.close):  # text, ended by the closer's token
        rules = [f"think_body: THINK {m(markers.close)}", "THINK: /(.|\\n)*/"]
    else:  # a lazy lexeme: the thinking ends at the first closing marker
        rules = [f"think_body[lazy]: /(.|\\n)*{regex_text(markers.close)}/"]
    rules.append("GAP: /[ \\t\\n]{1,4}/")
    if start == "inside":
        return rules + ["start: think_body GAP? answer"]
    return rules + [f"start: ({m(markers.open)} think_body GAP?)? answer"]


def grammar_text(answer: Answer, fmt: ChatFormat, start: ThinkingStart,
                 vocab: GrammarVocab) -> str:
    """The whole grammar: the thinking (if any), then the answer."""
    m = Markers(vocab)
    return "\n".join(thinking_rules(fmt, start, m) + answer_grammar(answer, fmt, m)) + "\n"
