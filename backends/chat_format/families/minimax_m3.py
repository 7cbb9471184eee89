"""MiniMax-M3: every tag of a call behind the namespace token `]<]minimax[>[` (NS below),
one block of invokes, each argument an element named by its key, objects and arrays
nested as elements (an array's as `item`):

    NS<tool_call>
    NS<invoke name="write_note">NS<text>Hi NS</text>NS<tags>NS<item>a NS</item>NS</tags>NS</invoke>
    NS</tool_call>

A leaf is raw text (typed by its schema: a string as it is, a number or boolean as JSON).
It thinks in `<mm:think>`; the model decides (the template's "adaptive") unless a request
switches thinking on or off, which sets the template's `thinking_mode` to "enabled" or
"disabled".
Its template names the namespace token and `<invoke name=`. The grammar writes the same
elements from each parameter's schema (objects and arrays nested, at most a few deep;
deeper, or a schema of alternatives, is text).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.base import ThinkingMarkers
from backends.chat_format.block import BlockSyntax, ParsedCall, Schemas, _types, typed_value
from backends.chat_format.call_grammar import CallGrammar, Markers, lit
from backends.chat_format.families.base import Family
from backends.chat_format.xml_calls import text_until, value_rule

NS = "]<]minimax[>["
OPEN, CLOSE = NS + "<tool_call>", NS + "</tool_call>"
THINK = ThinkingMarkers("<mm:think>", "</mm:think>")
INVOKE = re.compile(r'<invoke name="([^"\n]{1,200})">\s*')
ELEMENT = re.compile(r"<([^<>/\s][^<>\n]{0,199})>(.*)", re.DOTALL)
DEEPEST = 32
NESTED = 4  # how deep the grammar writes objects and arrays as elements


def matches(template: str) -> bool:
    return NS in template and "<invoke name=" in template


def closer(piece: str, key: str) -> bool:
    return piece.rstrip() == f"</{key}>"


def element(pieces: list[str], i: int, schema: dict | None, depth: int) -> tuple[object, int]:
    """The value of the element that opens `pieces[i]`, and the piece after its closer."""
    if depth > DEEPEST or i >= len(pieces):
        raise ValueError("not an element")
    found = ELEMENT.fullmatch(pieces[i])
    if found is None:
        raise ValueError("not an element")
    key, text = found[1], found[2]
    if i + 1 < len(pieces) and closer(pieces[i + 1], key):  # a leaf
        kinds = _types(schema)
        if not text and kinds in ({"array"}, {"object"}):
            return ([] if kinds == {"array"} else {}), i + 2
        return typed_value(text, schema), i + 2
    if text.strip():
        raise ValueError("text before a nested element")
    kinds = _types(schema)
    schema = schema if isinstance(schema, dict) else {}
    items: list = []
    members: dict = {}
    i += 1
    while i < len(pieces) and not closer(pieces[i], key):
        child = ELEMENT.fullmatch(pieces[i])
        if child is None:
            raise ValueError("not an element")
        name = child[1]
        if name == "item" and "object" not in kinds:
            value, i = element(pieces, i, schema.get("items"), depth + 1)
            items.append(value)
        else:
            props = schema.get("properties")
            sub = props.get(name) if isinstance(props, dict) else None
            members[name], i = element(pieces, i, sub, depth + 1)
    if i >= len(pieces):
        raise ValueError("an element not closed")
    if items and members:
        raise ValueError("items and members in one element")
    return (items if items or "array" in kinds else members), i + 1


def parse(block: str, schemas: Schemas) -> list[ParsedCall] | None:
    pieces = block.split(NS)
    if pieces[0].strip():
        return None
    calls: list[ParsedCall] = []
    i = 1
    while i < len(pieces):
        head = INVOKE.fullmatch(pieces[i])
        if head is None:
            return None
        name, i = head[1], i + 1
        params = (schemas.get(name) or {}).get("properties") or {}
        arguments: dict = {}
        while i < len(pieces) and not closer(pieces[i], "invoke"):
            key = ELEMENT.fullmatch(pieces[i])
            if key is None:
                return None
            schema = params.get(key[1]) if isinstance(params, dict) else None
            arguments[key[1]], i = element(pieces, i, schema, 0)
        if i >= len(pieces):
            return None
        calls.append(ParsedCall(name, arguments))
        i += 1
    return calls or None


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    ns = m(NS)
    # a leaf's text and the namespace token of its closer (text cannot hold the token)
    text = "M3TEXT " + ns if m.special(NS) else "m3text"

    def value(schema: object, depth: int) -> str:
        """A value and the namespace token before its closing tag."""
        kinds = _types(schema) if isinstance(schema, dict) else set()
        if isinstance(schema, dict) and depth < NESTED and kinds == {"object"}:
            props = schema.get("properties")
            required = schema.get("required") or ()
            children = [(e if k in required else f"({e})?") for k, sub in
                        (props.items() if isinstance(props, dict) else ())
                        if (e := tag_rule(str(k), sub, depth + 1))]
            return " ".join([*children, ns])
        if isinstance(schema, dict) and depth < NESTED and kinds == {"array"}:
            return f"({tag_rule('item', schema.get('items'), depth + 1)})* {ns}"
        rule = value_rule(schema)
        return text if rule is None else f"{rule} {ns}"

    def tag_rule(key: str, schema: object, depth: int) -> str:
        return f"{ns} {lit(f'<{key}>')} {value(schema, depth)} {lit(f'</{key}>')}"

    def invoke(tool: Tool) -> str:
        props = tool.parameters.get("properties")
        required = tool.parameters.get("required") or ()
        params = [(e if k in required else f"({e})?") for k, sub in
                  (props.items() if isinstance(props, dict) else ())
                  if (e := tag_rule(str(k), sub, 0))]
        return " ".join([ns, lit(f'<invoke name="{tool.name}">'), *params, ns,
                         lit("</invoke>")])

    rules = [f"fn_{i}: {invoke(tool)}" for i, tool in enumerate(tools)]
    rules.append("fn: " + " | ".join(f"fn_{i}" for i in range(len(tools))))
    rules += ["M3TEXT: /(.|\\n)*/"] if m.special(NS) else [text_until("m3text", NS)]
    many = ' ("\\n" fn)*' if parallel and tools else ""
    rules.append(f'rest: "\\n" fn{many} "\\n" {ns} "</tool_call>"')
    rules.append(f'calls: {ns} "<tool_call>" rest')
    return CallGrammar(rules, OPEN)


FAMILY = Family(
    name="minimax_m3",
    matches=matches,
    call_markers=(NS, OPEN, CLOSE),
    thinking=THINK,
    thinking_variable="thinking_mode",
    thinking_values=("disabled", "enabled"),
    blocks=BlockSyntax((OPEN,), parse, close=CLOSE),
    grammar=grammar,
)
