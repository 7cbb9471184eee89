"""The pieces a family's call grammar is written with (llguidance Lark text): marker texts as
grammar symbols, literals, and `%json` rules of a tool's argument schema.

A family's `grammar` (backends.chat_format.families.base.Family) returns its calls' rules,
the trigger text that opens the first call (where `auto` lets free text run until the model
opens one) and the rule for what follows the trigger; backends.grammar.lark puts them
together with JSON mode and thinking. This module imports no grammar library, so the
families can be read (and their text parsers used) without one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from backends.base import Tool

if TYPE_CHECKING:
    from backends.grammar.vocab import GrammarVocab

SPECIAL_PREFIX = b"\xff"  # llguidance's mark of a special token's bytes (backends.grammar.vocab)

# Arguments are written as Python's json.dumps writes them (", " and ": ", no newlines), the
# form Qwen, Llama and Mistral print their calls in: a fixed spelling also leaves a small
# model no room to loop on whitespace.
TOOL_JSON = {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False,
             "lenient": True}


@dataclass(frozen=True)
class CallGrammar:
    rules: list[str]  # defining `calls` (one or more calls) and `rest`
    trigger: str  # the text that opens the first call
    rest: str = "rest"  # the rule for what follows the trigger


class Markers:
    """Marker texts as grammar symbols of one vocabulary: a marker that is one special
    token is that token (`<[id]>`), so the model writes it as the token it was trained on;
    one that mixes special tokens and text is those tokens and that text, in order
    (`<|channel>thought`, Kimi K3's `<|open|>tools<|sep|>`); other markers are text."""

    def __init__(self, vocab: GrammarVocab) -> None:
        self.vocab = vocab

    def special(self, text: str) -> bool:
        return self.vocab.special_id(text) is not None

    def starts_special(self, text: str) -> bool:
        """`text` opens with a special token: text before it cannot hold that token, so a
        lexeme of any text ends where the marker starts."""
        parts = self.parts(text)
        return bool(parts) and isinstance(parts[0], int)

    def ends_generation(self, text: str) -> bool:
        token = self.vocab.special_id(text)
        return token is not None and token in self.vocab.eog

    def parts(self, text: str) -> list[int | str]:
        """`text` as its special tokens (ids) and the texts between them, in order."""
        token = self.vocab.special_id(text)
        if token is not None:
            return [token]
        out: list[int | str] = []
        pos = 0
        for i, piece in self._specials_in(text):
            at = text.find(piece, pos) if piece else -1
            if at < 0:  # a token whose text is not spelled out here: the marker is text
                return [text]
            if at > pos:
                out.append(text[pos:at])
            out.append(i)
            pos = at + len(piece)
        if pos < len(text):
            out.append(text[pos:])
        return out

    def _specials_in(self, text: str) -> list[tuple[int, str]]:
        """The special tokens `text` holds, in order, with their texts: from the texts the
        vocabulary names (MLX, Hugging Face tokenizers, whose encoders read no special
        text), else from llama.cpp's tokenizer reading special text."""
        if self.vocab.specials:
            names = sorted((n for n in self.vocab.specials if n), key=len, reverse=True)
            if not names:
                return []
            found = re.findall("|".join(re.escape(n) for n in names), text)
            return [(self.vocab.specials[n], n) for n in found]
        tok = self.vocab.tokenizer
        return [(i, tok.decode_bytes([i]).removeprefix(SPECIAL_PREFIX).decode("utf-8",
                                                                              "replace"))
                for i in tok.tokenize_str(text, parse_special=True)
                if tok.is_special_token(i)]

    def __call__(self, text: str) -> str:
        parts = self.parts(text) or [text]
        return " ".join(f"<[{p}]>" if isinstance(p, int) else lit(p) for p in parts)


def lit(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def regex_text(text: str) -> str:
    """`text` as a literal inside a Lark /regex/."""
    return re.escape(text).replace("/", "\\/")


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


def args_rule(tool: Tool) -> str:
    """A tool's arguments: a JSON object of its schema."""
    return json_rule(tool.parameters, TOOL_JSON)


def call_rules(tools: Sequence[Tool], key: str = "arguments") -> tuple[str, list[str]]:
    """`call`: one call object of any of `tools` ({"name": .., key: {..}}), and its rules."""
    rules = []
    for i, tool in enumerate(tools):
        head = lit(f'{{"name": "{tool.name}", "{key}": ')
        rules.append(f"call_{i}: {head} {args_rule(tool)} \"}}\"")
    rules.append("call: " + " | ".join(f"call_{i}" for i in range(len(tools))))
    return "call", rules


def one_of(name: str, alternatives: Sequence[str]) -> str:
    return f"{name}: " + " | ".join(alternatives)


def list_grammar(tools: Sequence[Tool], parallel: bool, m: Markers, open_: str,
                 close: str | None = None) -> CallGrammar:
    """Calls as one JSON list after `open_` (and before `close`):
    `OPEN[{"name": .., "arguments": {..}}, ..]CLOSE` (Mistral's 2024 list, Phi-4-mini,
    Nemotron Nano v2, Apriel)."""
    _, rules = call_rules(tools)
    more = ' (", " call)*' if parallel and tools else ""
    end = f" {m(close)}" if close else ""
    rules.append(f'rest: "[" call{more} "]"{end}')
    rules.append(f"calls: {m(open_)} rest")
    return CallGrammar(rules, open_)
