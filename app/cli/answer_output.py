"""How `ember run` and `ember chat` print an answer: the thinking apart from the answer.

On a terminal the thinking comes first, dimmed (ANSI faint), then a blank line and the answer,
as Ollama's CLI shows it. When stdout is a file or a pipe it gets the answer alone, and the
thinking goes to stderr between "Thinking…" and "…done thinking." lines, so
`ember run MODEL PROMPT > answer.txt` keeps only the answer. `hide` drops the thinking
(Ollama's --hidethinking).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import click

from backends.base import ToolCall

DIM, UNDIM = "\x1b[2m", "\x1b[22m"


@dataclass
class AnswerPrinter:
    tty: bool = field(default_factory=lambda: sys.stdout.isatty())
    hide: bool = False
    thinking: bool = False  # inside the thinking part
    answered: bool = False  # some answer text was printed

    def reasoning(self, text: str) -> None:
        if self.hide or not text:
            return
        if not self.thinking:
            self.thinking = True
            if self.tty:
                click.echo(f"{DIM}Thinking…\n", nl=False)
            else:
                click.echo("Thinking…", err=True)
        if self.tty:
            click.echo(text, nl=False)
        else:
            click.echo(text, nl=False, err=True)

    def _end_thinking(self) -> None:
        if self.thinking:
            self.thinking = False
            if self.tty:
                click.echo(f"{UNDIM}\n", nl=True)  # a blank line between thinking and answer
            else:
                click.echo("\n…done thinking.", err=True)

    def token(self, text: str) -> None:
        self._end_thinking()
        self.answered = self.answered or bool(text)
        click.echo(text, nl=False)

    def end(self, calls: tuple[ToolCall, ...] = ()) -> None:
        """The answer ended: close the thinking, then the calls it made, one line each."""
        self._end_thinking()
        if calls and self.answered:
            click.echo()
        for call in calls:
            click.echo(f"[called {call.name}({call.arguments})]")
        if calls:
            self.answered = False  # the calls ended with their own newline


def calls_json(calls: tuple[ToolCall, ...]) -> list[dict]:
    """Tool calls in --json output: arguments as the JSON text the model wrote (OpenAI's
    form); `json.loads` gives the object."""
    return [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]

