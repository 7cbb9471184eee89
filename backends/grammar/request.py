"""The constraint a request needs: JSON mode or a schema, forced or lazy tool calls.

`tool_choice` none renders no tools (ChatTemplate) and constrains nothing; auto with tools
constrains only what follows the model's own opening of a call. A grammar that llguidance
rejects (a schema feature it cannot compile) is the client's error, with its path.
"""

from __future__ import annotations

from backends.base import GenerationRequest
from backends.chat_format.base import ChatFormat
from backends.chat_format.families import by_name
from backends.errors import InvalidRequestError
from backends.grammar.constraint import Constraint
from backends.grammar.lark import Answer, ThinkingStart, grammar_text
from backends.grammar.vocab import GrammarVocab


def request_answer(request: GenerationRequest) -> Answer | None:
    """What the request's answer must be, or None when it is free."""
    json = request.json_mode or request.json_schema is not None
    choice = request.tool_choice
    tools = request.tools if choice.mode != "none" else ()
    if choice.mode == "function":
        tools = tuple(t for t in tools if t.name == choice.name)
    if not json and not tools:
        return None
    mode = "auto" if choice.mode == "none" else choice.mode
    return Answer(json=json, schema=request.json_schema, tools=tools, choice=mode,
                  parallel=request.parallel_tool_calls and choice.mode != "function")


def thinking_start(fmt: ChatFormat, prompt_tail: str, switched_off: bool = False
                   ) -> ThinkingStart:
    """Where the output starts, from the end of the rendered prompt. Thinking switched off
    through the template's own switch (`switched_off`; Kimi K3 then opens the response, not
    the thinking) starts after it: the grammar must not let the model open a thinking it
    was told not to have."""
    if fmt.thinking is None:
        return "after"
    tail = prompt_tail.rstrip()
    if tail.endswith(fmt.thinking.open):
        return "inside"
    if tail.endswith(fmt.thinking.close) or (switched_off and fmt.thinking_toggle):
        return "after"
    return "maybe"


def request_constraint(request: GenerationRequest, fmt: ChatFormat, vocab: GrammarVocab,
                       prompt_tail: str = "") -> Constraint | None:
    """The request's grammar state, or None when its answer is free. `prompt_tail` is the
    end of the prompt's text (whether it opened or closed the thinking)."""
    answer = request_answer(request)
    if answer is None:
        return None
    family = by_name(fmt.tools)
    free = answer.choice == "auto" and not answer.json
    if answer.tools and family.grammar is None:
        # a family without a call grammar: auto is free text its parser reads; forcing a
        # call cannot be done
        if not free:
            raise InvalidRequestError(
                f"the {fmt.tools} tool-call format has no grammar to force calls or JSON "
                "with tools; use tool_choice auto without response_format", "tool_choice")
        return None
    if answer.tools and free and not family.lazy_grammar:
        return None  # Kimi K3: its grammar forces calls only; auto is the parser's
    start = thinking_start(fmt, prompt_tail, request.thinking.enabled is False) \
        if request.messages is not None else "after"
    text = grammar_text(answer, fmt, start, vocab)
    try:
        return Constraint(vocab, text)
    except ValueError as e:
        where = "response_format" if answer.json else "tools"
        raise InvalidRequestError(f"cannot constrain the answer to this grammar: {e}",
                                  where) from e
