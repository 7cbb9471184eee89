"""A scripted model for `ember serve --mcp` tests: each generation answers with the next
scripted round (tests/support/fake_runtime.ScriptedRuntime's events), so the loop's rounds
run through the real app and routes without a model."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from backends.base import GenerationRequest, OutputEvent, TokenEvent, ToolCallEvent
from backends.errors import InvalidRequestError
from tests.support.fake_runtime import ScriptedRuntime


def call(index: int, name: str, arguments: dict, call_id: str = "") -> ToolCallEvent:
    return ToolCallEvent(index, json.dumps(arguments), id=call_id or f"call_{index}", name=name)


@dataclass
class Rounds(ScriptedRuntime):
    """A model whose every generation answers with the next scripted round."""
    rounds: list[list[OutputEvent]] = field(default_factory=list)
    too_long_after: int | None = None  # rounds after which the prompt no longer fits

    def fit_context(self, name, request, backend=None, context=None) -> int:
        if self.too_long_after is not None and len(self.requests) >= self.too_long_after:
            raise InvalidRequestError("the prompt is 9000 tokens, more than fits")
        return super().fit_context(name, request, backend, context)

    def generate(self, name: str, request: GenerationRequest, sink, backend=None):
        self.script = self.rounds.pop(0) if self.rounds else [TokenEvent("(unscripted)")]
        return super().generate(name, request, sink, backend)

    def play(self, *rounds: list[OutputEvent], too_long_after: int | None = None) -> None:
        self.rounds = list(rounds)
        self.too_long_after = too_long_after
        self.requests.clear()
