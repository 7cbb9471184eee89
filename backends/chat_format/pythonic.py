"""Pythonic tool calls, `[get_weather(city='LA'), get_time()]`, as Llama 4 and LFM2 write
them: a Python list of calls with keyword arguments whose values are literals (strings in
either quote, numbers, True/False/None, lists, tuples, dicts; JSON's true/false/null too, as
llama.cpp takes them). The text is parsed with `ast` and only those nodes are read: nothing
is ever evaluated, and anything else (a positional argument, `**kw`, a variable, an
expression) makes the whole list not calls.

`list_end` finds where such a list ends in streamed text, skipping brackets inside strings;
backends.chat_format.block holds the list back until then."""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Collection

from backends.chat_format.block import ParsedCall

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
