"""Pythonic tool calls, `[get_weather(city='LA'), get_time()]`, as Llama 4 and LFM2 write
them: a Python list of calls with keyword arguments whose values are literals (strings in
either quote, numbers, True/False/None, lists, tuples, dicts; JSON's true/false/null too, as
llama.cpp takes them). The text is parsed with `ast` and only those nodes are read: nothing
is ever evaluated, and anything else (a positional argument, `**kw`, a variable, an
expression) makes the whole list not calls.

`list_end` finds where such a list ends in streamed text, skipping brackets inside strings;
backends.chat_format.block holds the list back until then. `call_text` writes a call the
same way (for templates that show earlier calls only as text), and `call_rules` is the
grammar of one call: each argument's value is JSON, which this reader takes as Python."""

from __future__ import annotations

import ast
import json
import math
import re
import warnings
from collections.abc import Collection, Sequence

from backends.base import Tool
from backends.chat_format.block import ParsedCall
from backends.chat_format.call_grammar import TOOL_JSON, json_rule, lit

# a list that starts like a call: `[name(` (a dotted name too: `Calendar.create_event(`)
CALL_HEAD = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(")
HEAD_SO_FAR = re.compile(r"\[\s*(?:[A-Za-z_][\w.]*\s*)?")
# strings (either quote, with escapes) and brackets: what decides where a bracket closes
PIECES = re.compile(r'"(?:[^"\\\n]|\\.)*"?|\'(?:[^\'\\\n]|\\.)*\'?|[\[\](){}]')
OPENERS, CLOSERS = "([{", ")]}"
JSON_NAMES = {"true": True, "false": False, "null": None}


def bracket_end(text: str, start: int = 0) -> int | None:
    """Just past the bracket that closes the one at `start`, or None while it is open (or
    the brackets do not pair)."""
    depth = 0
    for piece in PIECES.finditer(text, start):
        token = piece.group()
        if token in OPENERS:
            depth += 1
        elif token in CLOSERS:
            depth -= 1
            if depth == 0:
                return piece.end()
            if depth < 0:
                return None
    return None


def closed_list_end(text: str, final: bool, close: str, opener: str = "[") -> int | None:
    """Past `close` after the list (pythonic or JSON; an object for `opener` "{") that
    starts `text`, so a closer inside one of its strings is text; without one, past the
    first closer. None while the block may go on."""
    start = len(text) - len(text.lstrip())
    if not text.startswith(opener, start):
        at = text.find(close)
        return at + len(close) if at >= 0 else None
    end = bracket_end(text, start)
    if end is None:
        return None
    tail = text[end:].lstrip()
    if tail.startswith(close):
        return len(text) - len(tail) + len(close)
    return None if close.startswith(tail) and not final else end


def list_end(text: str, final: bool) -> int | None:
    """Where a pythonic call list at the start of `text` ends: 0 when `text` is not one
    (answer text that happens to start with `[`), None while it may still be."""
    if CALL_HEAD.match(text) is None:
        undecided = HEAD_SO_FAR.fullmatch(text) is not None
        return None if undecided and not final else 0
    return bracket_end(text)


def read_calls(text: str, names: Collection[str] = ()) -> list[ParsedCall] | None:
    """The calls of a pythonic list, or None when `text` is not exactly one (or names a
    function not in `names`, when given)."""
    try:
        with warnings.catch_warnings():  # an invalid escape ("\\/") only warns
            warnings.simplefilter("ignore")
            node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(node, ast.List) or not node.elts:
        return None
    calls = []
    for item in node.elts:
        if not isinstance(item, ast.Call) or item.args:
            return None
        name = dotted_name(item.func)
        if name is None or (names and name not in names):
            return None
        arguments: dict = {}
        for keyword in item.keywords:
            if keyword.arg is None or keyword.arg in arguments:
                return None
            try:
                arguments[keyword.arg] = literal(keyword.value)
            except (ValueError, RecursionError):
                return None
        calls.append(ParsedCall(name, arguments))
    return calls


def dotted_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted_name(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def literal(node: ast.expr) -> object:
    """A literal node as its JSON value; ValueError for anything else."""
    if isinstance(node, ast.Constant):
        value = node.value
        if value is None or isinstance(value, str | bool | int):
            return value
        if isinstance(value, float) and math.isfinite(value):
            return value
        raise ValueError("not a JSON literal")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        number = literal(node.operand)
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise ValueError("a sign on something not a number")
        return -number if isinstance(node.op, ast.USub) else number
    if isinstance(node, ast.List | ast.Tuple):
        return [literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for key, item in zip(node.keys, node.values, strict=True):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                raise ValueError("a dict key that is not a string")
            out[key.value] = literal(item)
        return out
    if isinstance(node, ast.Name) and node.id in JSON_NAMES:
        return JSON_NAMES[node.id]
    raise ValueError("not a literal")


def python_value(value: object) -> str:
    """A JSON value as a Python literal (JSON strings and numbers already are)."""
    if value is None or isinstance(value, bool):
        return {None: "None", True: "True", False: "False"}[value]
    if isinstance(value, list):
        return "[" + ", ".join(python_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k), ensure_ascii=False)}: {python_value(v)}"
                               for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


def call_text(name: str, arguments: dict) -> str:
    """`name(key=value, ..)`, as the model writes it."""
    return f"{name}(" + ", ".join(f"{k}={python_value(v)}" for k, v in arguments.items()) + ")"


def call_rules(tools: Sequence[Tool]) -> list[str]:
    """`call`: one call of any of `tools`, `name(key=value, ..)`, its arguments in the
    schema's order (required ones always, others optional) and each value `%json` of its
    property's schema. A property whose name is no Python identifier cannot be written."""
    rules = []
    for i, tool in enumerate(tools):
        props = tool.parameters.get("properties") or {}
        required = set(tool.parameters.get("required") or ())
        keys = [k for k in props if isinstance(k, str) and k.isidentifier()]
        for j, key in enumerate(keys):
            schema = props[key] if isinstance(props[key], dict) else {}
            rules.append(f"call_{i}_{j}: {json_rule(schema, TOOL_JSON)}")
        pairs = [(key, f"call_{i}_{j}", key in required) for j, key in enumerate(keys)]
        rules.append(f"call_{i}: {lit(tool.name + '(')} {_arguments(pairs, True)} \")\"")
    rules.append("call: " + " | ".join(f"call_{i}" for i in range(len(tools))))
    return rules


def _arguments(pairs: list[tuple[str, str, bool]], first: bool) -> str:
    """The grammar of the arguments `pairs` (key, value rule, required), `first`: none
    written before them (so no comma leads)."""
    if not pairs:
        return ""
    (key, value, needed), rest = pairs[0], pairs[1:]
    head = f"{lit(('' if first else ', ') + key + '=')} {value} {_arguments(rest, False)}"
    if needed:
        return head
    if not first:
        return f"({lit(', ' + key + '=')} {value})? {_arguments(rest, False)}"
    skip = _arguments(rest, True)
    return f"({head} | {skip})" if skip else f"({head})?"
