"""Commands that generate: `ember run` (one answer) and `ember chat` (a conversation)."""

from __future__ import annotations

import json
import sys

import click

from app.cli import cli
from app.cli.common import installed_or_pull, sampling_from, sampling_options
from app.config import DEFAULT_MODEL
from app.errors import EmberError
from backends.base import (
    DoneEvent,
    ErrorEvent,
    GenerationRequest,
    Message,
    Stats,
    TokenEvent,
)


def _stats_line(stats: Stats) -> str:
    line = (f"{stats.completion_tokens} tokens, first token {stats.ttft_s:.2f} s, "
            f"{stats.decode_tokens_per_s:.1f} tokens/s, {stats.finish_reason}")
    if stats.truncated:
        line += " - earlier turns were dropped to fit the context"
    return line


@cli.command()
@click.argument("model")
@click.argument("prompt")
@sampling_options
@click.option("--system", default=None, help="system prompt")
@click.option("--raw", is_flag=True, help="send PROMPT as-is, without the chat template")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object with the stats")
@click.option("--backend", type=click.Choice(["llamacpp", "cuda"]), default="llamacpp",
              show_default=True,
              help="inference engine: llama.cpp, or Ember's own PyTorch engine (cuda; runs on "
                   "the CPU, slowly, where there is no NVIDIA GPU)")
def run(model: str, prompt: str, system: str | None, raw: bool, as_json: bool, backend: str,
        **kw) -> None:
    """Answer PROMPT with MODEL, streaming to the terminal ("-" reads PROMPT from stdin)."""
    from app.runtime import Runtime

    if prompt == "-":
        prompt = sys.stdin.read()
    installed = installed_or_pull(model)
    sampling = sampling_from(kw)
    if raw or not installed.chat:
        if system:
            raise EmberError(f"--system needs a chat model; {installed.ref} takes a raw prompt")
        request = GenerationRequest(prompt=prompt, sampling=sampling)
    else:
        messages = ((Message("system", system),) if system else ()) + (Message("user", prompt),)
        request = GenerationRequest(messages=messages, sampling=sampling)
    request.validate()
    with Runtime(backend=backend) as rt:
        loaded = rt.load(installed.ref, kw["context"])
        generation = rt.generate(installed.ref, request)
        done = None
        try:
            for event in generation:
                if isinstance(event, TokenEvent) and not as_json:
                    click.echo(event.text, nl=False)
                elif isinstance(event, DoneEvent):
                    done = event
                elif isinstance(event, ErrorEvent):
                    raise EmberError(event.message)
        except KeyboardInterrupt:
            generation.cancel()
            click.echo("\n[cancelled]", err=True)
            sys.exit(130)
    assert done is not None
    if as_json:
        st = done.stats
        click.echo(json.dumps({
            "text": done.text, "model": installed.id, "backend": loaded.backend,
            "prompt_tokens": st.prompt_tokens, "completion_tokens": st.completion_tokens,
            "ttft_s": st.ttft_s, "decode_tokens_per_s": st.decode_tokens_per_s,
            "finish_reason": st.finish_reason, "truncated": st.truncated}))
    else:
        click.echo()
        click.echo(f"[{_stats_line(done.stats)}]", err=True)


CHAT_HELP = "/reset clears the conversation, /system TEXT sets the system prompt, /bye leaves"


@cli.command()
@click.argument("model", default=DEFAULT_MODEL)
@sampling_options
@click.option("--system", default=None, help="system prompt")
def chat(model: str, system: str | None, **kw) -> None:
    """Chat with MODEL in the terminal. Ctrl+C stops an answer; Ctrl+D or /bye leaves."""
    from app.runtime import Runtime

    installed = installed_or_pull(model)
    if not installed.chat:
        raise EmberError(f"{installed.ref} has no chat template (a base model); "
                         f"use `ember run {installed.id} PROMPT` for completions")
    sampling = sampling_from(kw)
    sampling.validate()
    history: list[Message] = []
    with Runtime() as rt:
        loaded = rt.load(installed.ref, kw["context"])
        click.echo(f"{installed.ref} on {loaded.backend} ({loaded.plan.reason})", err=True)
        click.echo(CHAT_HELP, err=True)
        while True:
            try:
                line = input(">>> ")
            except EOFError:
                click.echo()
                return
            except KeyboardInterrupt:
                click.echo("\n(Ctrl+D or /bye to leave)")
                continue
            text = line.strip()
            if not text:
                continue
            if text in ("/bye", "/exit", "/quit"):
                return
            if text == "/reset":
                history.clear()
                click.echo("(conversation cleared)")
                continue
            if text.startswith("/system"):
                system = text.removeprefix("/system").strip() or None
                click.echo(f"(system prompt {'set' if system else 'cleared'})")
                continue
            if text.startswith("/"):
                click.echo(f"unknown command {text.split()[0]!r}; {CHAT_HELP}")
                continue
            history.append(Message("user", line))
            messages = ((Message("system", system),) if system else ()) + tuple(history)
            generation = rt.generate(installed.ref, GenerationRequest(messages=messages,
                                                                       sampling=sampling))
            answer = ""
            try:
                for event in generation:
                    if isinstance(event, TokenEvent):
                        answer += event.text
                        click.echo(event.text, nl=False)
                    elif isinstance(event, DoneEvent):
                        click.echo()
                        click.echo(f"[{_stats_line(event.stats)}]", err=True)
                    elif isinstance(event, ErrorEvent):
                        click.echo(f"\nerror: {event.message}", err=True)
            except KeyboardInterrupt:
                generation.cancel()
                for _ in generation:  # drain to the final event so the worker is free
                    pass
                click.echo("\n[stopped]", err=True)
            if answer:
                history.append(Message("assistant", answer))
            else:
                history.pop()  # nothing came back: keep the history a valid alternation


