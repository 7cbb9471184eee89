"""DeepSeek R1 (and V3 before 3.1): each call names its type, then the function, then its
arguments in a ```json fence, calls a newline apart, thinking in `<think>` (which the
template opens):

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

Its template renders `tools` itself (llama.cpp's llama-cpp-deepseek-r1). The parser is
families.deepseek_v3's, which reads both shapes. R1-Distill's templates write this shape
for past calls but never render `tools`: they stay generic (families.deepseek_v3 says why).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.call_grammar import CallGrammar, Markers, args_rule, lit
from backends.chat_format.families.base import Family
from backends.chat_format.families.deepseek_v3 import (
    CALL,
    CALL_END,
    CLOSE,
    FENCE,
    MARKERS,
    OPEN,
    SEP,
    SYNTAX,
)

READS_TOOLS = re.compile(r"\btools\b")


def matches(template: str) -> bool:
    return OPEN in template and FENCE in template and READS_TOOLS.search(template) is not None


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    rules = [f"call_{i}: {m(CALL)} \"function\" {m(SEP)} {lit(t.name + chr(10) + FENCE + chr(10))}"
             f" {args_rule(t)} \"\\n```\" {m(CALL_END)}" for i, t in enumerate(tools)]
    rules.append("call: " + " | ".join(f"call_{i}" for i in range(len(tools))))
    rules.append("rest: call" + (' ("\\n" call)*' if parallel and tools else "")
                 + f" {m(CLOSE)}")
    rules.append(f"calls: {m(OPEN)} rest")
    return CallGrammar(rules, OPEN)


FAMILY = Family(
    name="deepseek_r1",
    matches=matches,
    call_markers=MARKERS,
    blocks=SYNTAX,
    grammar=grammar,
)
