"""Gemma 4 (google gemma-4 it, and its interleaved-thinking template): each call is
`<|tool_call>call:NAME{..}<tool_call|>`, several in a row, after any answer text; the
arguments are Gemma's own notation, not JSON: bare keys, strings between `<|"|>` tokens
(nothing is escaped inside), numbers, true, false, null, `{..}` and `[..]`:

    <|channel>thought
    The user wants Paris.<channel|><|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}
    <tool_call|><|tool_call>call:get_time{}<tool_call|>

Thinking is the `thought` channel, `<|channel>thought\\n..<channel|>`; with thinking off
the template writes an empty one itself. `<|"|>`, `<|channel>` and the call markers are
special tokens the backend must show, or strings would lose their quotes.

The grammar writes the offered tool's own keys in its schema's order, each at most once and
the required ones always (as llguidance writes a JSON schema's object; llama.cpp's grammar
for Gemma 4 reads no schema at all), each value of its schema's type: string, string enum,
integer, number, boolean, an object's keys the same way, a list's items of its `items`
(any Gemma value where the schema says no more, or nested past 8). An object that lists no
keys takes any.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.base import ThinkingMarkers
from backends.chat_format.block import BlockSyntax, ParsedCall, Schemas
from backends.chat_format.call_grammar import CallGrammar, Markers, lit, regex_text
from backends.chat_format.families.base import Family
from backends.chat_format.scan import find_marker, safe_length

OPEN, CLOSE, QUOTE = "<|tool_call>", "<tool_call|>", '<|"|>'
CHANNEL, CHANNEL_END = "<|channel>", "<channel|>"
THINK = ThinkingMarkers(CHANNEL + "thought", CHANNEL_END)
HEAD = re.compile(r"\s*call:([\w.\-]{1,256})\s*")
NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
KEY = re.compile(r"\s*([^:{}\[\],<\s][^:{}\[\],<]*?)\s*:\s*")
BARE_KEY = re.compile(r"[^:{}\[\],<\s](?:[^:{}\[\],<]{0,62}[^:{}\[\],<\s])?")
WORDS = {"true": True, "false": False, "null": None}
TYPED_DEPTH = 8  # objects and lists nested deeper take any Gemma value
MAX_DEPTH = 64  # deeper arguments are no call (and no recursion past it)


def matches(template: str) -> bool:
    return f"'{OPEN}call:'" in template


class CallEnd:
    """A call ends at `<tool_call|>` outside its strings; a string ends at the next quote."""

    def __init__(self) -> None:
        self.pos, self.in_string = 0, False

    def __call__(self, text: str, final: bool) -> int | None:
        while True:
            markers = (QUOTE,) if self.in_string else (QUOTE, CLOSE)
            hit = find_marker(text[self.pos:], markers)
            if hit is None:
                self.pos += safe_length(text[self.pos:], markers)
                return None
            self.pos += hit[0] + len(hit[1])
            if hit[1] == CLOSE:
                return self.pos
            self.in_string = not self.in_string


class Reader:
    """Gemma's notation read into JSON values (ValueError where it is not that)."""

    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
            self.pos += 1

    def value(self, depth: int) -> object:
        if depth > MAX_DEPTH:
            raise ValueError("nested too deeply")
        self.skip()
        text, pos = self.text, self.pos
        if text.startswith(QUOTE, pos):
            end = text.find(QUOTE, pos + len(QUOTE))
            if end < 0:
                raise ValueError("a string without its end")
            self.pos = end + len(QUOTE)
            return text[pos + len(QUOTE):end]
        if text.startswith('"', pos):  # a JSON string, which a model may write instead
            value, self.pos = json.JSONDecoder().raw_decode(text, pos)
            return value
        if text.startswith("{", pos):
            return self.members("{", "}", depth)
        if text.startswith("[", pos):
            return self.members("[", "]", depth)
        for word, value in WORDS.items():
            if text.startswith(word, pos):
                self.pos += len(word)
                return value
        number = NUMBER.match(text, pos)
        if number is None:
            raise ValueError(f"no value at {pos}")
        self.pos = number.end()
        return json.loads(number.group(0))

    def members(self, opener: str, closer: str, depth: int) -> dict | list:
        self.pos += 1
        out: dict | list = {} if opener == "{" else []
        self.skip()
        while not self.text.startswith(closer, self.pos):
            if out:
                self.expect(",")
            if isinstance(out, dict):
                key = self.key()
                out[key] = self.value(depth + 1)
            else:
                out.append(self.value(depth + 1))
            self.skip()
        self.pos += 1
        return out

    def key(self) -> str:
        self.skip()
        if self.text.startswith(QUOTE, self.pos):
            key = self.value(0)
            self.skip()
            self.expect(":")
            return str(key)
        found = KEY.match(self.text, self.pos)
        if found is None:
            raise ValueError(f"no key at {self.pos}")
        self.pos = found.end()
        return found.group(1)

    def expect(self, char: str) -> None:
        self.skip()
        if not self.text.startswith(char, self.pos):
            raise ValueError(f"{char!r} expected at {self.pos}")
        self.pos += 1


def parse(block: str, schemas: Schemas) -> list[ParsedCall] | None:
    """One call (its block runs up to and with `<tool_call|>`, which the end rule includes)."""
    text = block[:-len(CLOSE)] if block.endswith(CLOSE) else block
    head = HEAD.match(text)
    if head is None or not text.startswith("{", head.end()):
        return None
    reader = Reader(text)
    reader.pos = head.end()
    arguments = reader.value(0)
    if not isinstance(arguments, dict) or text[reader.pos:].strip():
        return None
    return [ParsedCall(head.group(1), arguments)]


# -- the grammar: the tool's keys, values typed where the schema names a simple type ------
def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    q = m(QUOTE)
    if m.special(QUOTE):  # the string's text cannot hold the token that ends it
        rules = [f"g_string: {q} G_STR {q}", "G_STR: /(.|\\n)*/"]
    else:  # a lazy lexeme: the string ends at the first quote
        rules = [f"g_string: {q} g_rest", f"g_rest[lazy]: /(.|\\n)*{regex_text(QUOTE)}/"]
    rules += [
        "g_number: /-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?/",
        "g_int: /-?(0|[1-9][0-9]{0,17})/",
        'g_bool: "true" | "false"',
        'g_value: g_string | g_number | g_bool | "null" | g_dict | g_list',
        'g_dict: "{" (g_kv ("," g_kv)*)? "}"',
        'g_kv: /[A-Za-z_][A-Za-z0-9_]{0,63}/ ":" g_value',
        'g_list: "[" (g_value ("," g_value)*)? "]"',
    ]
    typed = _Typed(q)
    for i, tool in enumerate(tools):
        args = typed.members(tool.parameters or {}, 0)
        rules.append(f"body_{i}: {lit(f'call:{tool.name}{{')} {args} \"}}\" {m(CLOSE)}")
    rules += typed.rules
    rules.append("body: " + " | ".join(f"body_{i}" for i in range(len(tools))))
    rules.append(f"call: {m(OPEN)} body")
    rules.append("rest: body" + (" call*" if parallel and tools else ""))
    rules.append(f"calls: {m(OPEN)} rest")
    return CallGrammar(rules, OPEN)


def _key(key: str, q: str) -> str:
    """A key as the template writes it, bare (`city:`); one the parser could not read bare
    is between quotes."""
    return lit(key + ":") if BARE_KEY.fullmatch(key) else f"{q} {lit(key)} {q} \":\""


class _Typed:
    """The rules of values typed by their schema: an object's keys in its schema's order,
    each at most once and the required ones always (as llguidance writes a JSON schema's
    object), a list's items of its `items`; simple types as their own rules. Past
    TYPED_DEPTH, or where the schema says nothing of them, any Gemma value."""

    def __init__(self, q: str) -> None:
        self.q, self.count = q, 0
        self.rules: list[str] = []

    def name(self) -> str:
        self.count += 1
        return f"t{self.count}"

    def members(self, schema: dict, depth: int) -> str:
        """The rule of an object's members (between its braces)."""
        name = self.name()
        props = schema.get("properties")
        keys = [(k, v) for k, v in props.items() if isinstance(v, dict)] \
            if isinstance(props, dict) else []
        if not keys or depth > TYPED_DEPTH:
            self.rules.append(f'{name}: (g_kv ("," g_kv)*)?')
            return name
        required = set(schema.get("required") or ())
        # NAME_f_j: keys j.. with none written yet; NAME_t_j: keys j.. after one (each after
        # ","); "" is the empty rest past the last key
        first, then = "", ""
        for j in range(len(keys) - 1, -1, -1):
            key, value = keys[j]
            kv = f"{name}_kv{j}"
            self.rules.append(f"{kv}: {_key(key, self.q)} {self.value(value, depth + 1)}")
            written = f"{kv} {then}".strip()
            if key in required:
                first, then = written, f'"," {written}'
            else:
                first = f"{written} | {first}" if first else f"({written})?"
                then = f'("," {kv})? {then}'.strip()
            self.rules.append(f"{name}_f{j}: {first}")
            if j:
                self.rules.append(f"{name}_t{j}: {then}")
            first, then = f"{name}_f{j}", f"{name}_t{j}"
        self.rules.append(f"{name}: {first}")
        return name

    def value(self, schema: dict, depth: int) -> str:
        q = self.q
        enum = schema.get("enum")
        if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
            return "(" + " | ".join(f"{q} {lit(v)} {q}" for v in enum) + ")"
        kind = schema.get("type")
        if kind == "object" and schema.get("properties") and depth <= TYPED_DEPTH:
            return f'"{{" {self.members(schema, depth)} "}}"'
        items = schema.get("items")
        if kind == "array" and isinstance(items, dict) and items and depth <= TYPED_DEPTH:
            item = self.name()
            self.rules.append(f"{item}: {self.value(items, depth + 1)}")
            return f'"[" ({item} ("," {item})*)? "]"'
        return {"string": "g_string", "integer": "g_int", "number": "g_number",
                "boolean": "g_bool", "object": "g_dict", "array": "g_list"}.get(
                    kind if isinstance(kind, str) else "", "g_value")


FAMILY = Family(
    name="gemma4",
    matches=matches,
    call_markers=(OPEN, CLOSE, QUOTE, CHANNEL, CHANNEL_END),
    thinking=THINK,
    blocks=BlockSyntax((OPEN,), parse, block_end=CallEnd),
    grammar=grammar,
)
