"""A model's output replayed token by token, as a backend would stream it: the text
tokenized with a real vocabulary, each token detokenized alone (control tokens hidden, the
format's markers shown, as backends.llamacpp does), and the bytes fed through a BaseJob, so a
test sees both the streamed events and the DoneEvent they add up to."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from backends.base import DoneEvent, Event, FinishReason, GenerationRequest, Message, Tool
from backends.chat_format.render import ChatTemplate
from backends.job import BaseJob
from backends.text import TextStream
from tests.support.llama_sdist import vocab

WEATHER = Tool("get_weather", "The weather in a city",
               {"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"]})
TIME = Tool("get_time", "The time now")


class Vocab:
    """A vocabulary-only GGUF (no weights: milliseconds to load)."""

    def __init__(self, path: Path) -> None:
        import llama_cpp
        from llama_cpp._internals import LlamaModel
        from llama_cpp._logger import set_verbose

        set_verbose(False)
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self.model = LlamaModel(path_model=str(path), params=params, verbose=False)

    def tokenize(self, text: str) -> list[int]:
        return self.model.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def piece(self, token: int) -> bytes:
        return self.model.detokenize([token], special=False)


@cache
def load_vocab(name: str) -> Vocab:
    return Vocab(vocab(name))


@dataclass
class Replay:
    events: list[Event]  # as streamed, DoneEvent last
    pieces: list[bytes]  # what each token detokenized to

    @property
    def done(self) -> DoneEvent:
        done = self.events[-1]
        assert isinstance(done, DoneEvent)
        return done

    @property
    def streamed(self) -> list[Event]:
        return self.events[:-1]


def replay(chat: ChatTemplate, vocab_name: str, output: str, *,
           request: GenerationRequest | None = None, reason: FinishReason = "stop",
           tokens: int | None = None) -> Replay:
    """`output` as the model's tokens after the prompt `chat` renders for `request` (tools
    get_weather and get_time offered by default); `tokens` cuts it after that many tokens
    (max_tokens), with finish reason "length"."""
    request = request or GenerationRequest(messages=(Message("user", "Weather in Paris?"),),
                                           tools=(WEATHER, TIME))
    prompt = chat.render(request.messages or (), request)
    v = load_vocab(vocab_name)
    markers = chat.use_marker_tokens(v.tokenize)  # as a backend does at load
    ids = v.tokenize(output)
    if tokens is not None:
        ids, reason = ids[:tokens], "length"
    job = BaseJob("s", request, None, truncated=False, text=TextStream(()),
                  output=chat.parser(request, prompt))
    events: list[Event] = []
    pieces = []
    for token in ids:
        piece = markers.get(token)
        piece = piece if piece is not None else v.piece(token)
        pieces.append(piece)
        events += [e for _, e in job.emitted(piece)]
    events += [e for _, e in job.finish(reason, prompt_tokens=1, completion_tokens=len(ids),
                                         cached_tokens=0)]
    return Replay(events, pieces)
