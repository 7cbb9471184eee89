"""One model family's way of writing tool calls and thinking, in one place: how its chat
template is recognized, the markers its model writes, how its output is parsed, how the
conversation's earlier calls and the offered tools reach its template, and the grammar that
forces its calls.

Each family is one module of backends.chat_format.families; the registry there lists them.
A family's parser is one of two kinds: `json_calls` (one JSON object per call in tags,
streamed argument by argument: backends.chat_format.tagged) or `blocks` (a block of calls
read whole: backends.chat_format.block). Harmony (gpt-oss) has its own parser.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from backends.base import Message, Tool
from backends.chat_format.base import ThinkingMarkers
from backends.chat_format.block import BlockSyntax
from backends.chat_format.call_grammar import CallGrammar, Markers
from backends.chat_format.tagged import CallSyntax

THINK = ThinkingMarkers("<think>", "</think>")

# tools, parallel calls allowed, markers -> the rules of the calls (see call_grammar)
GrammarFn = Callable[[Sequence[Tool], bool, Markers], CallGrammar]
# the conversation's dicts (as templates read them) and the offered tools' dicts -> the
# dicts the template is given (a family whose template reads tools from a message)
ToolsPlacer = Callable[[list[dict], list[dict]], list[dict]]
# the offered tools -> their description in the family's own words, for a template that
# does not render tools but whose model was trained on a format (DeepSeek V3.1)
ToolsPrompt = Callable[[Sequence[Tool]], str]
# the conversation's dicts and the template's text -> the dicts as that template reads them
# (Ministral's thinking as a content block, Kimi's call ids)
TurnShaper = Callable[[list[dict], str], list[dict]]


def mentions(template: str, *texts: str) -> bool:
    return all(t in template for t in texts)


@dataclass(frozen=True)
class Family:
    name: str  # the format's name (ChatFormat.tools)
    matches: Callable[[str], bool]  # the template's text is this family's
    call_markers: tuple[str, ...] = ()  # marker texts the backend must show as text
    # how the model thinks, when its template says it does (None: `<think>` if the
    # template names it)
    thinking: ThinkingMarkers | None = None
    # its templates build the thinking markers rather than name them (Kimi K3's macros):
    # they think all the same
    builds_thinking: bool = False
    json_calls: CallSyntax | None = None
    blocks: BlockSyntax | None = None
    harmony: bool = False
    native_tools: bool = True  # the template renders `tools` (or `tools_placer` does)
    tools_placer: ToolsPlacer | None = None
    tools_prompt: ToolsPrompt | None = None
    one_call_per_turn: bool = False  # its template takes one call per assistant turn
    # the template's own name for its thinking switch, given with enable_thinking (Granite
    # 3.x and Kimi K3: `thinking`; MiniMax-M3: `thinking_mode`), and the values it takes for
    # off and on where they are not false and true (MiniMax-M3: "disabled", "enabled")
    thinking_variable: str | None = None
    thinking_values: tuple[object, object] = (False, True)
    call_id: Callable[[str], str] | None = None  # ids as its template insists on them
    shape_turns: TurnShaper | None = None
    grammar: GrammarFn | None = None
    # its grammar can follow free text (`auto`: the answer runs free until the trigger);
    # False: only forced calls use it, and `auto` is left free for the parser (Kimi K3,
    # whose answer is framed in special tokens the free text cannot frame)
    lazy_grammar: bool = True
    # history: Ember rewrites calls and results as text turns (the generic format)
    history_as_text: Callable[[tuple[Message, ...], tuple[Tool, ...]],
                              tuple[Message, ...]] | None = None

    @property
    def parses_calls(self) -> bool:
        return self.json_calls is not None or self.blocks is not None or self.harmony
