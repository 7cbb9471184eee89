"""A conversation's shown path as the model is given it: the system prompt (with the tools'
note when tools are offered), each turn with its thinking and tool calls, tool results with
their call, the documents' block before the last question, the preset's or the app's
sampling, speculation, the chat's Think setting and the context policy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from app.chat.policy import DROP_OLD_TURNS, ContextPolicy
from app.config import Paths
from app.history import Conversation, StoredMedia, StoredMessage
from app.mcp.tool_loop import DEFAULT_SYSTEM, TOOLS_NOTE
from app.preferences import Settings
from app.presets import Preset, load_options
from app.runtime.thinking import LEVELS, ThinkingSupport, thinking_for
from backends.base import (
    DEFAULT_SPECULATION,
    GenerationRequest,
    Message,
    SamplingParams,
    SpeculativeParams,
    Thinking,
    Tool,
    ToolChoice,
)
from backends.media import MEDIA_MARKER, Media, plain_text

KEPT_STATUSES = ("complete", "stopped", "interrupted")  # what the model sees of the past
CONTEXT_ROLES = ("user", "assistant", "tool")
TITLE_CHARS = 48


def title_from(text: str) -> str:
    first = " ".join(text.split())
    return first if len(first) <= TITLE_CHARS else first[:TITLE_CHARS - 1] + "…"


def think_setting(stored: str | None, support: ThinkingSupport) -> str | None:
    """The conversation's Think choice as this model can take it: None (its default) for a
    model without the choice; an effort level is "on" for a model without levels."""
    if stored in support.settings:
        return stored
    if stored in LEVELS and "on" in support.settings:
        return "on"
    return None


def with_documents(history: list[Message], prompt_text: str) -> list[Message]:
    """The conversation with the documents' block before the last question (the stored
    question stays as the user typed it)."""
    last = next((i for i in range(len(history) - 1, -1, -1) if history[i].role == "user"),
                None)
    if last is None or not prompt_text.strip():
        return history
    question = history[last]
    return [*history[:last], replace(question, content=f"{prompt_text}\n\n{question.content}"),
            *history[last + 1:]]


# a stored image or clip as the model is given it; None: it could not be read (said by the
# loader), and the model is told one was there
MediaLoader = Callable[[StoredMedia], Media | None]


def _with_media(m: StoredMessage, load: MediaLoader | None) -> tuple[str, tuple[Media, ...]]:
    """A message's text with one MEDIA_MARKER per image it is given, before the text (the
    text itself never places one: plain_text); `load` None: a model that cannot see, told in
    words what it is not shown."""
    text = plain_text(m.content)
    if not m.media:
        return text, ()
    loaded = [load(x) for x in m.media] if load is not None else [None] * len(m.media)
    given = tuple(x for x in loaded if x is not None)
    left_out = len(loaded) - len(given)
    parts = [MEDIA_MARKER] * len(given)
    if left_out:
        parts.append(f"[{left_out} attachment{'s' if left_out != 1 else ''} not shown]")
    return "\n".join([*parts, text] if text else parts), given


def context_messages(path: Sequence[StoredMessage], load: MediaLoader | None = None
                     ) -> list[Message]:
    """The shown path's messages the model is given (an answer streaming into it, a failed
    one and empty turns are left out), each question's images loaded by `load`."""
    out = []
    for m in path:
        if m.role in CONTEXT_ROLES and m.status in KEPT_STATUSES \
                and (m.content.strip() or m.tool_calls or m.role == "tool" or m.media):
            content, media = _with_media(m, load)
            out.append(Message(m.role, content, m.reasoning, m.tool_calls, m.tool_call_id,
                               m.tool_name, media=media))
    return out


@dataclass(frozen=True)
class TurnOptions:
    """How a front end wants its answers made: sampling, speculation, where the model loads
    and, for a front end with its own Think switch (`ember chat`), the thinking outright."""
    sampling: SamplingParams
    speculative: SpeculativeParams | None = DEFAULT_SPECULATION
    context: int | None = None  # None: the load plan's
    backend: str | None = None  # None: the one the Runtime picks
    gpu_layers: int | None = None
    kv_cache: str | None = None
    quant: str | None = None  # weights packed at load (the cuda backend's int8/int4)
    thinking: Thinking | None = None  # None: the conversation's Think setting


def sampling_for(preset: Preset | None, settings: Settings) -> SamplingParams:
    """The conversation's preset's sampling settings, else the app's."""
    if preset is not None:
        return preset.sampling()
    s = settings
    return SamplingParams(temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens)


def options_from(settings: Settings, preset: Preset | None, model: str | None, remote: bool,
                 home: Paths | None) -> TurnOptions:
    """The window's options: its Settings, the conversation's preset and the settings
    remembered for a local model (app.presets.ModelLoad)."""
    s = settings
    speculative = None
    if s.speculative and not remote:
        # prompt lookup is the default: it gives way quietly where it cannot run
        speculative = (SpeculativeParams(method="draft", draft_model=s.draft_model)
                       if s.draft_model else DEFAULT_SPECULATION)
    if model and not remote:
        context, gpu_layers, kv_cache = load_options(model, s.context, s.gpu_layers, home)
    else:
        context, gpu_layers, kv_cache = (s.context or None,
                                         s.gpu_layers if s.gpu_layers >= 0 else None, None)
    return TurnOptions(sampling_for(preset, s), speculative, context,
                       None if s.backend == "auto" else s.backend, gpu_layers, kv_cache)


def build_request(conv: Conversation, path: Sequence[StoredMessage], options: TurnOptions,
                  support: ThinkingSupport, tools: tuple[Tool, ...] = (),
                  documents_text: str = "", answer_only: bool = False,
                  policy: ContextPolicy = DROP_OLD_TURNS, media: MediaLoader | None = None
                  ) -> GenerationRequest:
    """The request for the next answer after `path` (the conversation's shown path); its
    images through `media` (None: a model that cannot see is told they are not shown)."""
    history = context_messages(path, media)
    if documents_text:
        history = with_documents(history, documents_text)
    prompt = conv.system_prompt.strip()
    if tools:
        prompt = f"{prompt or DEFAULT_SYSTEM} {TOOLS_NOTE}"
    system = (Message("system", prompt),) if prompt else ()
    thinking = (options.thinking if options.thinking is not None
                else thinking_for(think_setting(conv.thinking, support)))
    return GenerationRequest(messages=system + tuple(history), sampling=options.sampling,
                             speculative=options.speculative, thinking=thinking,
                             truncate=policy.truncate, tools=tools,
                             tool_choice=ToolChoice("none" if answer_only else "auto"))
