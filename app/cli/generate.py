"""Commands that generate: `ember run` (one answer) and `ember chat` (a conversation)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from app.cli import cli
from app.cli.answer_output import AnswerPrinter, calls_json
from app.cli.common import installed_or_pull, sampling_from, sampling_options
from app.config import DEFAULT_MODEL
from app.runtime.backend_table import NAMES as BACKENDS
from backends.base import (
    DEFAULT_SPECULATION,
    DoneEvent,
    ErrorEvent,
    GenerationRequest,
    Message,
    ReasoningEvent,
    SpeculativeParams,
    Stats,
    Thinking,
    TokenEvent,
)
from backends.errors import EmberError
from backends.media import MEDIA_MARKER, Media, plain_text

if TYPE_CHECKING:
    from app.runtime import Runtime


def _stats_line(stats: Stats) -> str:
    line = (f"{stats.completion_tokens} tokens, first token {stats.ttft_s:.2f} s, "
            f"{stats.decode_tokens_per_s:.1f} tokens/s, {stats.finish_reason}")
    if stats.reasoning_tokens:
        line += f" ({stats.reasoning_tokens} thinking)"
    if stats.draft_tokens:
        line += (f", {stats.accepted_tokens}/{stats.draft_tokens} speculative tokens "
                 "accepted")
    if stats.truncated:
        line += " - earlier turns were dropped to fit the context"
    return line


@dataclass(frozen=True)
class Target:
    """What a `run` or `chat` talks to: a local model loaded in a backend, or a remote one."""
    ref: str
    chat: bool  # takes messages (a chat template), not only a raw prompt
    backend: str
    model: str  # as --json reports it
    about: str  # one line for the chat banner


def open_target(rt: Runtime, model: str, context: int | None, backend: str | None,
                quant: str | None = None) -> Target:
    """Load a local model (pulling it first if it is in the registry), or check that a
    remote one exists, so that a wrong name fails before the first prompt."""
    from app.pull.hf_pull import has_hub_prefix

    if rt.is_remote(model) and not has_hub_prefix(model):  # hf.co/OWNER/REPO is local
        rt.check_model(model)
        # OpenAI-compatible servers apply their own chat template; --raw uses /completions
        return Target(model, True, "remote", model, "on its remote server")
    installed = installed_or_pull(model)
    loaded = rt.load(installed.ref, context, backend, quant=quant)
    return Target(installed.ref, installed.chat, loaded.backend, installed.id,
                  f"on {loaded.backend} ({loaded.plan.reason})")


def speculative_options(f: Callable) -> Callable:
    """Prompt lookup runs by default (backends.base.DEFAULT_SPECULATION); --lookup asks for
    it outright (an error where it cannot run), --draft-model for a draft model,
    --no-speculation for neither."""
    f = click.option("--no-speculation", is_flag=True,
                     help="decode one token at a time (by default prompt lookup proposes "
                          "tokens where it pays)")(f)
    f = click.option("--max-draft", type=int, default=8, show_default=True,
                     help="most tokens proposed per speculative step")(f)
    f = click.option("--lookup", is_flag=True,
                     help="speculative decoding by prompt lookup (n-grams of the prompt and "
                          "answer; no second model)")(f)
    return click.option("--draft-model", default=None,
                        help="speculative decoding with this smaller model (same tokenizer)")(f)


def speculative_from(draft_model: str | None, lookup: bool, max_draft: int,
                     no_speculation: bool = False) -> SpeculativeParams | None:
    if draft_model and lookup:
        raise click.UsageError("--draft-model and --lookup are two ways to speculate: pick one")
    if no_speculation and (draft_model or lookup):
        raise click.UsageError("--no-speculation turns off what --draft-model and --lookup "
                               "ask for: pick one")
    if lookup:
        return SpeculativeParams(method="lookup", max_draft=max_draft)
    if draft_model:
        return SpeculativeParams(method="draft", draft_model=draft_model, max_draft=max_draft)
    if no_speculation:
        return None
    return replace(DEFAULT_SPECULATION, max_draft=max_draft)


EFFORTS = ("low", "medium", "high")


def thinking_options(f: Callable) -> Callable:
    """--think/--no-think switch a reasoning model's thinking (by default it does as its
    template says); --think-effort sets how hard (gpt-oss; implies --think)."""
    f = click.option("--hide-thinking", is_flag=True,
                     help="do not print the model's thinking (it still thinks)")(f)
    f = click.option("--think-effort", type=click.Choice(EFFORTS), default=None,
                     help="how hard a reasoning model thinks (models whose template takes "
                          "an effort, such as gpt-oss); implies --think")(f)
    return click.option("--think/--no-think", default=None,
                        help="let a reasoning model think before it answers, or not "
                             "(default: the model's own default)")(f)


def thinking_from(think: bool | None, effort: str | None) -> Thinking:
    if effort is not None and think is False:
        raise click.UsageError("--think-effort sets how a model thinks, --no-think stops it "
                               "thinking: pick one")
    if effort is not None:
        return Thinking(enabled=True, effort=effort)  # type: ignore[arg-type]
    return Thinking(enabled=think)


def backend_option(f: Callable) -> Callable:
    f = click.option("--quantize", "quant", type=click.Choice(("int8", "int4", "fp8")),
                     default=None,
                     help="cuda backend: pack the weights as int8, int4 or fp8 (GPUs of "
                          "compute capability 8.9+) at load (Ember's kernels)")(f)
    return click.option("--backend", type=click.Choice(BACKENDS), default=None,
                        help="run a local model on this backend (default: chosen for this "
                             "machine, see `ember hw`)")(f)


def user_message(text: str, media: tuple[Media, ...] = ()) -> Message:
    """A question with one media marker per image before its text (the text never places
    one of its own: backends.media.plain_text)."""
    if not media:
        return Message("user", text)
    return Message("user", "\n".join([MEDIA_MARKER] * len(media) + [plain_text(text)]),
                   media=media)


def check_sees(rt: Runtime, model: str) -> None:
    """An EmberError naming the installed models that see, when `model` cannot; a model not
    installed yet is let through (its pull or load says what is wrong)."""
    from app.chat.attachments import cannot_see_text, model_sees, seeing_models
    from app.pull.hf_pull import has_hub_prefix

    remote = rt.is_remote(model) and not has_hub_prefix(model)
    if remote or model_sees(rt.store, model) is False:
        raise EmberError(cannot_see_text(model, seeing_models(rt.store), remote))


@cli.command()
@click.argument("model")
@click.argument("prompt")
@sampling_options
@backend_option
@speculative_options
@thinking_options
@click.option("--system", default=None, help="system prompt")
@click.option("--raw", is_flag=True, help="send PROMPT as-is, without the chat template")
@click.option("--json", "as_json", is_flag=True,
              help="print one JSON object: the answer, its thinking, tool calls and stats")
@click.option("--image", "images", multiple=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="an image (or audio clip) the question is about; repeatable (a model "
                   "that sees: one with a vision projector)")
def run(model: str, prompt: str, system: str | None, raw: bool, as_json: bool,
        backend: str | None, quant: str | None, draft_model: str | None, lookup: bool,
        max_draft: int, no_speculation: bool, think: bool | None, think_effort: str | None,
        hide_thinking: bool, images: tuple[Path, ...],
        **kw: Any) -> None:
    """Answer PROMPT with MODEL, streaming to the terminal ("-" reads PROMPT from stdin).
    MODEL is an installed model or NAME/model on a remote endpoint (`ember remote`).
    A reasoning model's thinking is shown dimmed before the answer (on stderr when stdout
    is not a terminal). `--image FILE` asks about a picture."""
    from app.chat.attachments import attachment_from_file
    from app.config import paths
    from app.runtime.choose import choose_runtime, describe

    if prompt == "-":
        prompt = sys.stdin.read()
    if images and raw:
        raise EmberError("--image needs the chat template: leave out --raw")
    # read and checked first: a broken file fails before a model loads
    media = tuple(attachment_from_file(path).media for path in images)
    sampling = sampling_from(kw)
    sampling.validate()
    speculative = speculative_from(draft_model, lookup, max_draft, no_speculation)
    thinking = thinking_from(think, think_effort)
    with choose_runtime(paths()) as rt:
        if rt.is_service:
            click.echo(f"[{describe(rt)}]", err=True)
        if media:
            check_sees(rt, model)
        target = open_target(rt, model, kw["context"], backend, quant)
        if draft_model and not rt.is_remote(model):
            installed_or_pull(draft_model)
        if raw or not target.chat:
            if system:
                raise EmberError(f"--system needs a chat model; {target.ref} takes a raw prompt")
            request = GenerationRequest(prompt=prompt, sampling=sampling,
                                        speculative=speculative, truncate=True)
        else:
            messages = (((Message("system", system),) if system else ())
                        + (user_message(prompt, media),))
            request = GenerationRequest(messages=messages, sampling=sampling,
                                        speculative=speculative, thinking=thinking,
                                        truncate=True)
        request.validate()
        generation = rt.submit(target.ref, request, backend=backend)
        done = None
        printer = AnswerPrinter(hide=hide_thinking)
        try:
            for event in generation:
                if as_json:
                    if isinstance(event, DoneEvent):
                        done = event
                    elif isinstance(event, ErrorEvent):
                        raise EmberError(event.message)
                elif isinstance(event, TokenEvent):
                    printer.token(event.text)
                elif isinstance(event, ReasoningEvent):
                    printer.reasoning(event.text)
                elif isinstance(event, DoneEvent):
                    done = event
                    printer.end(event.tool_calls)
                elif isinstance(event, ErrorEvent):
                    printer.end()
                    if event.partial:
                        click.echo()  # the partial answer stays on screen, the error below it
                    raise EmberError(event.message)
        except KeyboardInterrupt:
            generation.cancel()
            click.echo("\n[cancelled]", err=True)
            sys.exit(130)
    assert done is not None
    if as_json:
        st = done.stats
        click.echo(json.dumps({
            "text": done.text, "reasoning": done.reasoning,
            "tool_calls": calls_json(done.tool_calls), "model": target.model,
            "backend": target.backend,
            "prompt_tokens": st.prompt_tokens, "completion_tokens": st.completion_tokens,
            "reasoning_tokens": st.reasoning_tokens,
            "ttft_s": st.ttft_s, "decode_tokens_per_s": st.decode_tokens_per_s,
            "finish_reason": st.finish_reason, "truncated": st.truncated,
            "cached_tokens": st.cached_tokens, "media_tokens": st.media_tokens,
            "draft_tokens": st.draft_tokens,
            "accepted_tokens": st.accepted_tokens}, ensure_ascii=False))
    else:
        if printer.answered:
            click.echo()
        click.echo(f"[{_stats_line(done.stats)}]", err=True)


@cli.command()
@click.argument("model", default=DEFAULT_MODEL)
@sampling_options
@backend_option
@thinking_options
@click.option("--system", default=None, help="system prompt")
def chat(model: str, system: str | None, backend: str | None, quant: str | None,
         think: bool | None, think_effort: str | None, hide_thinking: bool, **kw: Any) -> None:
    """Chat with MODEL (installed, or NAME/model on a remote endpoint) in the terminal.
    The conversation is kept in the history (the window shows it too); /tools switches on
    the MCP servers of mcp.json, /attach FILE adds a document, /retry and /edit keep both
    versions. Ctrl+C stops an answer; Ctrl+D or /bye leaves."""
    from app.chat.request import TurnOptions
    from app.cli.chat_terminal import CHAT_HELP, chat_loop
    from app.config import paths
    from app.runtime.choose import choose_runtime, describe

    sampling = sampling_from(kw)
    sampling.validate()
    thinking = thinking_from(think, think_effort)
    with choose_runtime(paths()) as rt:
        if rt.is_service:
            click.echo(describe(rt), err=True)
        target = open_target(rt, model, kw["context"], backend, quant)
        if not target.chat:
            raise EmberError(f"{target.ref} has no chat template (a base model); "
                             f"use `ember run {target.model} PROMPT` for completions")
        click.echo(f"{target.ref} {target.about}", err=True)
        click.echo(CHAT_HELP, err=True)
        options = TurnOptions(sampling, DEFAULT_SPECULATION, kw["context"], backend,
                              quant=quant, thinking=thinking)
        chat_loop(rt, target.ref, options, system, hide_thinking, _stats_line)
