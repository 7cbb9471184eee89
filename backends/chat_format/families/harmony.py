"""gpt-oss's harmony format: the answer is a run of messages, each a header and a body.

    <|channel|>analysis<|message|>THINKING<|end|>
    <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{..}
    <|call|>
    <|start|>assistant<|channel|>final<|message|>ANSWER<|return|>

The prompt ends with `<|start|>assistant`, so the output starts in a header. A header with a
recipient `to=functions.NAME` (before or after the channel) is a call whose body is its JSON
arguments; the analysis channel is thinking; final (and commentary to no one, a preamble the
user sees) is answer. <|call|> and <|return|> end generation, so they are rarely seen: a call
is whole when its JSON is."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from backends.base import Tool, ToolCallEvent
from backends.chat_format.call_grammar import CallGrammar, Markers, args_rule, lit
from backends.chat_format.families.base import Family
from backends.chat_format.json_call import ValueReader
from backends.chat_format.scan import (
    Sink,
    SteppedParser,
    find_marker,
    new_call_id,
    safe_length,
)

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
CONSTRAIN, END, CALL, RETURN = "<|constrain|>", "<|end|>", "<|call|>", "<|return|>"
MARKERS = (START, CHANNEL, MESSAGE, CONSTRAIN, END, CALL, RETURN)
BODY_ENDS = (END, CALL, RETURN, START, CHANNEL)
RECIPIENT = re.compile(r"to=([^\s<]+)")
CHANNEL_NAME = re.compile(re.escape(CHANNEL) + r"\s*(\w+)")

# header: reading a message's header; body: a message's text; args: a call's JSON;
# between: after a message's end, until the next one starts
State = Literal["header", "body", "args", "between"]
Kind = Literal["thinking", "answer", "skip"]


@dataclass
class HarmonyParser(SteppedParser):
    tools_offered: bool
    state: State = "header"
    kind: Kind = "answer"
    buf: str = ""
    header: str = ""
    sink: Sink = field(default_factory=Sink)
    index: int = -1
    name: str = ""  # of the call whose arguments are being read
    reader: ValueReader | None = None
    announced: bool = False
    messages: int = 0  # message bodies begun

    @property
    def thinking(self) -> bool:
        return self.state == "body" and self.kind == "thinking"

    @property
    def cut_call(self) -> bool:
        return self.state == "args" and self.announced and not (
            self.reader is not None and self.reader.done)

    def _ended(self) -> None:
        if self.state == "header" and not self.messages:
            # no harmony at all (a model that ignored its format): its text is the answer
            plain = self.header + self.buf
            for marker in MARKERS:
                plain = plain.replace(marker, "")
            self.sink.put(plain, thinking=False)

    def _step(self, final: bool) -> bool:
        return getattr(self, f"_{self.state}")(final)

    def _header(self, final: bool) -> bool:
        hit = find_marker(self.buf, (MESSAGE,))
        if hit is None:
            keep = safe_length(self.buf, (MESSAGE,))
            self.header += self.buf[:keep]
            self.buf = self.buf[keep:]
            return False
        self.header += self.buf[:hit[0]]
        self.buf = self.buf[hit[0] + len(MESSAGE):]
        self._begin_body(self.header)
        self.header = ""
        return True

    def _begin_body(self, header: str) -> None:
        self.messages += 1
        self.sink.marker()
        recipient = RECIPIENT.search(header)
        channel = CHANNEL_NAME.search(header)
        if recipient is not None:
            to = recipient.group(1)
            if to.startswith("functions.") and self.tools_offered:
                self.name = to[len("functions."):]
                self.reader, self.announced = ValueReader(), False
                self.state = "args"
                return
            self.kind = "skip"  # a built-in tool (browser, python) Ember does not offer
        elif channel is not None and channel.group(1) == "analysis":
            self.kind = "thinking"
        else:
            self.kind = "answer"
        self.state = "body"

    def _body(self, final: bool) -> bool:
        hit = find_marker(self.buf, BODY_ENDS)
        if hit is None:
            keep = safe_length(self.buf, BODY_ENDS)
            if self.kind != "skip":
                self.sink.put(self.buf[:keep], thinking=self.kind == "thinking")
            self.buf = "" if final else self.buf[keep:]
            return False
        at, marker = hit
        if self.kind != "skip":
            self.sink.put(self.buf[:at], thinking=self.kind == "thinking")
        self.buf = self.buf[at + len(marker):]
        self.sink.marker()
        self._after_marker(marker)
        return True

    def _after_marker(self, marker: str) -> None:
        if marker == START:
            self.state, self.header = "header", ""
        elif marker == CHANNEL:  # a new header without <|end|><|start|>assistant first
            self.state, self.header = "header", CHANNEL
        else:
            self.state = "between"

    def _args(self, final: bool) -> bool:
        reader = self.reader
        assert reader is not None
        before = len(reader.text)
        used = reader.advance(self.buf)
        self.buf = self.buf[used:]
        if reader.bad:  # not JSON: not a call Ember can report
            self.state, self.kind = "body", "skip"
            return True
        if reader.started and not self.announced:
            self.index += 1
            self.sink.events.append(ToolCallEvent(self.index, id=new_call_id(), name=self.name))
            self.announced = True
        if len(reader.text) > before:
            self.sink.events.append(ToolCallEvent(self.index, arguments=reader.text[before:]))
        if reader.done:
            self.state = "between"
            return True
        return False

    def _between(self, final: bool) -> bool:
        hit = find_marker(self.buf, (START, CHANNEL))
        if hit is None:
            self.buf = self.buf[safe_length(self.buf, (START, CHANNEL)):]
            return False
        at, marker = hit
        self.buf = self.buf[at + len(marker):]
        self._after_marker(marker)
        return True


# -- the family ------------------------------------------------------------------------------
def matches(template: str) -> bool:
    return CHANNEL in template and MESSAGE in template


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    # <|call|> ends generation (llama.cpp and mlx-lm count it among the end tokens): the
    # grammar's end then allows exactly the end tokens, and llguidance reserves those
    call_end = "" if m.ends_generation(CALL) else f" {m(CALL)}"
    rules = []
    for i, tool in enumerate(tools):
        rules.append(f"hcall_{i}: {lit(f' to=functions.{tool.name} ')} "
                     f"{m(CONSTRAIN)} \"json\" {m(MESSAGE)} {args_rule(tool)}{call_end}")
    rules.append("rest: " + " | ".join(f"hcall_{i}" for i in range(len(tools))))
    # the model stops at <|call|>: one call per turn, whatever `parallel` says
    rules.append(f"calls: {m(CHANNEL)} \"commentary\" rest")
    return CallGrammar(rules, CHANNEL)


FAMILY = Family(
    name="harmony",
    matches=matches,
    call_markers=MARKERS,
    harmony=True,
    one_call_per_turn=True,
    grammar=grammar,
)
