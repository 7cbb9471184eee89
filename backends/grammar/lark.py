"""The grammar of an answer, as llguidance Lark text.

An answer is, after the thinking (when the model thinks in marked text):
- JSON mode: one JSON object; a JSON schema: a value of that schema;
- tool calls (`required`, or the named tool): one or more calls in the model's format
  (exactly one without parallel calls, or for the named tool) and nothing else;
- `auto` with tools: free text until the model opens a call (the format's trigger), then the
  rest of the call constrained, then another call or the end: llama-server's lazy grammar.

The call texts, per ChatFormat.tools (what backends.chat_format parses back):
  hermes   <tool_call>\\n{"name": "NAME", "arguments": {...}}\\n</tool_call>  (newline between)
  llama3   {"name": "NAME", "parameters": {...}}
  mistral  [TOOL_CALLS][{"name": "NAME", "arguments": {...}}, ...]
  phi4     <|tool_call|>[{"name": "NAME", "arguments": {...}}]<|/tool_call|>
  harmony  <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
  generic  [TOOL_REQUEST]{"name": "NAME", "arguments": {...}}[END_TOOL_REQUEST]
A marker that is one special token of the vocabulary is that token (`<[id]>`), so the model
writes Qwen's `<tool_call>` as the token it was trained on; other markers are text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from backends.base import Tool
from backends.chat_format.base import ChatFormat, ToolFormat
from backends.grammar.vocab import GrammarVocab

# Arguments are written as Python's json.dumps writes them (", " and ": ", no newlines), the
# form Qwen, Llama and Mistral print their calls in: a fixed spelling also leaves a small
# model no room to loop on whitespace.
TOOL_JSON = {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False,
             "lenient": True}
# Answers in JSON mode may be pretty-printed, with whitespace runs bounded (llama.cpp's
# JSON_GBNF bounds them too) so a model cannot pad forever.
ANSWER_JSON = {"whitespace_pattern": "[ \\t\\n]{0,20}", "lenient": False}
ANY_OBJECT = {"type": "object"}

# Where the output starts relative to the thinking: "inside" (the prompt opened it, as
# DeepSeek-R1-Distill's template does), "after" (no thinking: it was closed or there is none),
# "maybe" (the model may open it itself, Qwen3).
ThinkingStart = Literal["inside", "after", "maybe"]

TOOL_FORMATS: tuple[ToolFormat, ...] = ("hermes", "llama3", "mistral", "phi4", "harmony",
                                        "generic")


@dataclass(frozen=True)
class Answer:
    """What the answer must be: `json` (JSON mode; `schema` None is any object), and/or
    `tools` with their choice ("required", "function" or "auto")."""
    json: bool = False
    schema: dict | None = None
    tools: tuple[Tool, ...] = ()
    choice: Literal["auto", "required", "function"] = "auto"
    parallel: bool = True


class Markers:
    """Marker texts as grammar symbols of one vocabulary."""

    def __init__(self, vocab: GrammarVocab) -> None:
        self.vocab = vocab

    def special(self, text: str) -> bool:
        return self.vocab.special_id(text) is not None

    def __call__(self, text: str) -> str:
        token = self.vocab.special_id(text)
        return f"<[{token}]>" if token is not None else lit(text)


def lit(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def closed(schema: object) -> object:
    """`schema` with objects that list their properties and say nothing of others closed to
    others (additionalProperties false), as llama.cpp's schema-to-grammar converter reads
    them: a small model otherwise invents arguments the schema permits but no tool reads.
    Branches of allOf stay open (closing them would reject each other's properties)."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: (v if k in ("allOf", "const", "enum", "default", "examples")
               else {n: closed(s) for n, s in v.items()}
               if k in ("properties", "$defs", "definitions") and isinstance(v, dict)
               else closed(v)) for k, v in schema.items()}
    if "properties" in out and not any(k in out for k in (
            "additionalProperties", "patternProperties", "unevaluatedProperties", "allOf")):
        out["additionalProperties"] = False
    return out


def json_rule(schema: dict, options: dict) -> str:
    """`%json` of a schema (closed, see `closed`), written with the given llguidance options
    (x-guidance)."""
    shut = closed(schema)
    merged = dict(shut) if isinstance(shut, dict) else {}
    merged["x-guidance"] = {**options, **schema.get("x-guidance", {})}
    return "%json " + json.dumps(merged, ensure_ascii=False)


def call_rules(tools: Sequence[Tool], key: str = "arguments") -> tuple[str, list[str]]:
    """`call`: one call object of any of `tools` ({"name": .., key: {..}}), and its rules."""
    rules = []
    for i, tool in enumerate(tools):
        head = lit(f'{{"name": "{tool.name}", "{key}": ')
        rules.append(f"call_{i}: {head} {json_rule(tool.parameters, TOOL_JSON)} \"}}\"")
    rules.append("call: " + " | ".join(f"call_{i}" for i in range(len(tools))))
    return "call", rules


def calls_grammar(fmt: ToolFormat, tools: Sequence[Tool], parallel: bool,
                  m: Markers) -> tuple[list[str], str, str]:
    """The rules of one or more calls (`calls`), the trigger text that opens the first call,
    and `rest`: the rule for what follows the trigger."""
    many = parallel and len(tools) > 0
    if fmt == "harmony":
        # <|call|> ends generation (llama.cpp and mlx-lm count it among the end tokens): the
        # grammar's end then allows exactly the end tokens, and llguidance reserves those
        call_end = "" if m.vocab.special_id("<|call|>") in m.vocab.eog else f" {m('<|call|>')}"
        rules = []
        for i, tool in enumerate(tools):
            rules.append(f"hcall_{i}: {lit(f' to=functions.{tool.name} ')} "
                         f"{m('<|constrain|>')} \"json\" {m('<|message|>')} "
                         f"{json_rule(tool.parameters, TOOL_JSON)}{call_end}")
        rules.append("rest: " + " | ".join(f"hcall_{i}" for i in range(len(tools))))
        # the model stops at <|call|>: one call per turn, whatever `parallel` says
        rules.append(f"calls: {m('<|channel|>')} \"commentary\" rest")
        return rules, "<|channel|>", "rest"
    key = "parameters" if fmt == "llama3" else "arguments"
    _, rules = call_rules(tools, key)
    if fmt == "hermes":
        open_, close = m("<tool_call>"), m("</tool_call>")
        rules.append(f'rest: "\\n" call "\\n" {close}' + (' ("\\n" block)*' if many else ""))
        rules.append(f'block: {open_} "\\n" call "\\n" {close}')
        rules.append(f"calls: {open_} rest")
        return rules, "<tool_call>", "rest"
    if fmt == "llama3":  # one call: the format has no list
        rules += ["rest: call", "calls: call"]
        return rules, "{", "rest"
    if fmt in ("mistral", "phi4"):
        open_text = "[TOOL_CALLS]" if fmt == "mistral" else "<|tool_call|>"
        close = f" {m('<|/tool_call|>')}" if fmt == "phi4" else ""
        more = ' (", " call)*' if many else ""
        rules.append(f'rest: "[" call{more} "]"{close}')
        rules.append(f"calls: {m(open_text)} rest")
        return rules, open_text, "rest"
    # generic: a template without tool support (Gemma 3)
    open_, close = m("[TOOL_REQUEST]"), m("[END_TOOL_REQUEST]")
    rules.append(f"rest: call {close}" + (' ("\\n" block)*' if many else ""))
    rules.append(f"block: {open_} call {close}")
    rules.append(f"calls: {open_} rest")
    return rules, "[TOOL_REQUEST]", "rest"


def answer_grammar(answer: Answer, fmt: ChatFormat, m: Markers) -> list[str]:
    """Rules defining `answer` (harmony: its messages before and including the answer)."""
    tool_fmt: ToolFormat = fmt.tools if fmt.tools in TOOL_FORMATS else "generic"
    if fmt.harmony:
        tool_fmt = "harmony"
    rules: list[str] = []
    choices: list[str] = []
    if answer.json:
        rules.append("json_answer: " + json_rule(answer.schema or ANY_OBJECT, ANSWER_JSON))
        choices.append("json_answer")
    trigger, rest = "", ""
    if answer.tools:
        call_rules_, trigger, rest = calls_grammar(tool_fmt, answer.tools, answer.parallel,
                                                   m)
        rules += call_rules_
        choices.append("calls")
    free = bool(answer.tools) and answer.choice == "auto" and not answer.json
    if tool_fmt == "harmony":
        return rules + harmony_answer(choices, free, m)
    if not free:
        return rules + ["answer: " + " | ".join(choices)]
    # auto: free text, then maybe calls, opened by the trigger
    rules.append("TEXT: /(.|\\n)*/")
    if tool_fmt == "llama3":  # a call is the whole answer, which then starts with "{"
        rules.append("PLAIN: /([^{](.|\\n)*)?/")
        return rules + ["answer: PLAIN | calls"]
    if m.special(trigger):  # the text cannot hold the token: it ends where the call starts
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


def regex_text(text: str) -> str:
    """`text` as a literal inside a Lark /regex/."""
    return re.escape(text).replace("/", "\\/")


def thinking_rules(fmt: ChatFormat, start: ThinkingStart, m: Markers) -> list[str]:
    """`start`, with the thinking before the answer where the output may have it."""
    markers = fmt.thinking
    if markers is None or fmt.harmony or start == "after":
        return ["start: answer"]
    if m.special(markers.close):
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
