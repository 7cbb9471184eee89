"""Streamed answers read back the way clients read them, to compare with whole answers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class Streamed:
    content: str = ""
    reasoning: str = ""
    calls: dict[int, list[str]] = field(default_factory=dict)  # index -> id, name, arguments
    finish_reason: str | None = None
    usage: object = None

    def tool_calls(self) -> list[tuple[str, str, str]]:
        return [tuple(c) for _, c in sorted(self.calls.items())]  # type: ignore[misc]


def openai_stream(chunks: Iterable) -> Streamed:
    """chat.completion.chunk objects of the openai client, concatenated as its users do: a
    call's id and name come once, its arguments in pieces."""
    out = Streamed()
    for chunk in chunks:
        if chunk.usage is not None:
            out.usage = chunk.usage
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        out.content += delta.content or ""
        out.reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        for piece in delta.tool_calls or ():
            call = out.calls.setdefault(piece.index, ["", "", ""])
            if piece.id:
                assert not call[0], f"call {piece.index} got a second id"
                call[0] = piece.id
            if piece.function and piece.function.name:
                assert not call[1], f"call {piece.index} got a second name"
                call[1] = piece.function.name
            call[2] += (piece.function.arguments if piece.function else None) or ""
        if choice.finish_reason:
            assert out.finish_reason is None and delta.content is None \
                and not delta.tool_calls, "the finish reason comes in a chunk of its own"
            out.finish_reason = choice.finish_reason
    return out
