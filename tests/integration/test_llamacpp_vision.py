"""Images through Ember's llama.cpp engine, on the tiny vision models of
tests/support/tiny_vision.py (random weights in the real Gemma 3 and Qwen2.5-VL layouts,
loaded by the same code as a download): the image reaches the model (the answer's logits
follow it), its tokens count in the stats, a second request on the same image is served
from the prefix cache, image and text requests decode together, and bad input is an
InvalidRequestError."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image

from backends.base import (
    DoneEvent,
    GenerationRequest,
    LoadPlan,
    Message,
    SamplingParams,
)
from backends.errors import InvalidRequestError
from backends.llamacpp.backend import LlamaCppBackend
from backends.media import MEDIA_MARKER, Media, decode_image
from backends.prompt import run_alone
from tests.support.tiny_vision import (
    TinyVisionModel,
    write_tiny_gemma3_vision,
    write_tiny_qwen2vl_vision,
)


@dataclass(frozen=True)
class VisionFiles:
    """What a backend reads of an installed model (backends.base.ModelFiles)."""
    path: Path
    projector: Path | None
    architecture: str
    id: str = "tiny-vision"
    format: str = "gguf"
    context_length: int = 4096

    @property
    def ref(self) -> str:
        return f"{self.id}:f32"


PLAN = LoadPlan(context=1024, threads=2, parallel=2, batch=512)


def png(seed: int, size: int = 896) -> bytes:
    """A picture of coloured bands (another seed, other colours), PNG-encoded."""
    img = Image.new("RGB", (size, size))
    for y in range(0, size, 64):
        shade = (seed * 97 + y) % 256
        img.paste(((shade * 3) % 256, shade, (255 - shade)), (0, y, size, y + 64))
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module", params=["gemma3", "qwen2vl"])
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[TinyVisionModel, LlamaCppBackend]:
    folder = tmp_path_factory.mktemp(request.param)
    fixture = (write_tiny_gemma3_vision if request.param == "gemma3"
               else write_tiny_qwen2vl_vision)(folder)
    backend = LlamaCppBackend()
    backend.load(VisionFiles(fixture.model, fixture.projector, fixture.family), PLAN)
    yield fixture, backend
    backend.unload()


def ask(question: str, *images: Media, logprobs: int | None = 5,
        max_tokens: int = 4) -> GenerationRequest:
    content = "".join(MEDIA_MARKER for _ in images) + question
    return GenerationRequest(
        messages=(Message("user", content, media=tuple(images)),),
        sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=1),
        logprobs=logprobs, speculative=None)


def done(backend: LlamaCppBackend, request: GenerationRequest) -> DoneEvent:
    request.validate()
    events = list(run_alone(backend, request))
    last = events[-1]
    assert isinstance(last, DoneEvent), events
    return last


def first_logprobs(event: DoneEvent) -> list[tuple[str, float]]:
    return [(t.token, round(t.logprob, 5)) for t in event.logprobs[0].top]


def test_the_answer_follows_the_image(tiny):
    fixture, backend = tiny
    a, b = decode_image(png(1, fixture.image_size)), decode_image(png(2, fixture.image_size))
    with_a = done(backend, ask("What is this?", a))
    again_a = done(backend, ask("What is this?", decode_image(png(1, fixture.image_size))))
    with_b = done(backend, ask("What is this?", b))
    assert first_logprobs(with_a) == first_logprobs(again_a)
    assert first_logprobs(with_a) != first_logprobs(with_b)
    assert with_a.stats.media_tokens == fixture.image_tokens
    text_only = done(backend, ask("What is this?"))
    # the image's tokens count in the prompt's: mtmd's count, plus its delimiters' text
    assert with_a.stats.prompt_tokens >= text_only.stats.prompt_tokens + fixture.image_tokens
    assert backend.count_prompt_tokens(ask("What is this?", a)) == with_a.stats.prompt_tokens


def test_a_second_question_on_the_same_image_comes_from_the_cache(tiny):
    fixture, backend = tiny
    shot = decode_image(png(7, fixture.image_size))
    first = done(backend, ask("Describe the picture.", shot, max_tokens=3))
    turn = (Message("user", MEDIA_MARKER + "Describe the picture.", media=(shot,)),
            Message("assistant", first.text),
            Message("user", "And its colours?"))
    second = done(backend, GenerationRequest(
        messages=turn, sampling=SamplingParams(temperature=0.0, max_tokens=3),
        speculative=None))
    # the first turn, image included, was in the slot's cache (short of the last tokens
    # or so, where the answer's text may tokenize otherwise once it follows the prompt)
    assert second.stats.cached_tokens >= first.stats.prompt_tokens - 4
    assert second.stats.cached_tokens > fixture.image_tokens + 4
    assert second.stats.media_tokens == fixture.image_tokens


def test_image_and_text_requests_decode_together(tiny):
    fixture, backend = tiny
    image_request = ask("What is this?", decode_image(png(3, fixture.image_size)), max_tokens=6)
    text_request = ask("Say something.", max_tokens=6)
    alone_image = done(backend, image_request)
    alone_text = done(backend, text_request)
    backend.submit("img", image_request)
    backend.submit("txt", text_request)
    finished: dict[str, DoneEvent] = {}
    steps = 0
    while len(finished) < 2:
        steps += 1
        assert steps < 200
        for stream, event in backend.step():
            if isinstance(event, DoneEvent):
                finished[stream] = event
    # greedy: the same answers as alone (the cache may serve the prompts now)
    assert finished["img"].text == alone_image.text
    assert finished["txt"].text == alone_text.text


def test_bad_media_requests_are_refused_clearly(tiny):
    fixture, backend = tiny
    shot = decode_image(png(4, fixture.image_size))
    with pytest.raises(InvalidRequestError, match="marker"):
        GenerationRequest(messages=(Message("user", "no marker", media=(shot,)),)).validate()
    clip = Media("audio", b"RIFF\x00\x00\x00\x00WAVEfmt ", source_format="wav")
    with pytest.raises(InvalidRequestError, match="does not hear"):
        done(backend, ask("Listen.", clip))
    # the engine goes on serving
    assert done(backend, ask("What is this?", shot)).stats.media_tokens > 0


def test_a_model_without_a_projector_reads_text_only(tmp_path: Path):
    fixture = write_tiny_gemma3_vision(tmp_path)
    backend = LlamaCppBackend()
    backend.load(VisionFiles(fixture.model, None, fixture.family), PLAN)
    try:
        with pytest.raises(InvalidRequestError, match="reads text only"):
            done(backend, ask("What is this?", decode_image(png(1, fixture.image_size))))
        assert done(backend, ask("Hello")).stats.media_tokens == 0
    finally:
        backend.unload()
