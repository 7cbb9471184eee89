"""Audio through Ember's llama.cpp engine, on the tiny Qwen2-Audio of tests/support/tiny_audio.py
(random weights in the real `qwen2a` projector layout, loaded by the same code as a download):
a WAV clip reaches the model (the answer's logits follow it), its tokens count in the stats,
a second question on the same clip is served from the prefix cache, a clip at another rate and
in stereo is resampled by mtmd's helper, and an image for this model, which only hears, is an
InvalidRequestError."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backends.errors import InvalidRequestError
from backends.llamacpp.backend import LlamaCppBackend
from backends.media import decode_audio, decode_image
from tests.integration.test_llamacpp_vision import (
    PLAN,
    VisionFiles,
    ask,
    done,
    first_logprobs,
    png,
)
from tests.support.tiny_audio import TinyAudioModel, sine_wav, write_tiny_qwen2_audio

Tiny = tuple[TinyAudioModel, LlamaCppBackend]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Tiny]:
    fixture = write_tiny_qwen2_audio(tmp_path_factory.mktemp("qwen2a"))
    backend = LlamaCppBackend()
    backend.load(VisionFiles(fixture.model, fixture.projector, "qwen2", id="tiny-audio"), PLAN)
    yield fixture, backend
    backend.unload()


def test_the_answer_follows_the_clip(tiny: Tiny) -> None:
    fixture, backend = tiny
    la = decode_audio(sine_wav(440))
    with_la = done(backend, ask("What do you hear?", la))
    again_la = done(backend, ask("What do you hear?", decode_audio(sine_wav(440))))
    with_other = done(backend, ask("What do you hear?", decode_audio(sine_wav(1000))))
    assert first_logprobs(with_la) == first_logprobs(again_la)
    assert first_logprobs(with_la) != first_logprobs(with_other)
    assert with_la.stats.media_tokens == fixture.clip_tokens
    text_only = done(backend, ask("What do you hear?"))
    # the clip's tokens count in the prompt's: mtmd's count, plus <|audio_bos|>/<|audio_eos|>
    assert with_la.stats.prompt_tokens >= text_only.stats.prompt_tokens + fixture.clip_tokens
    assert backend.count_prompt_tokens(ask("What do you hear?", la)) == with_la.stats.prompt_tokens


def test_a_second_question_on_the_same_clip_comes_from_the_cache(tiny: Tiny) -> None:
    fixture, backend = tiny
    clip = decode_audio(sine_wav(660, seconds=2.0))
    first = done(backend, ask("Transcribe this.", clip, max_tokens=3))
    second = done(backend, ask("Transcribe this.", decode_audio(sine_wav(660, seconds=2.0)),
                               max_tokens=3))
    assert second.stats.cached_tokens > fixture.clip_tokens
    assert second.stats.media_tokens == first.stats.media_tokens == fixture.clip_tokens


def test_a_stereo_clip_at_another_rate_is_resampled_and_heard(tiny: Tiny) -> None:
    fixture, backend = tiny

    def heard(raw: bytes) -> dict[str, float]:
        event = done(backend, ask("What do you hear?", decode_audio(raw), logprobs=20))
        assert event.stats.media_tokens == fixture.clip_tokens
        return {t.token: t.logprob for t in event.logprobs[0].top}

    native = heard(sine_wav(440))
    # the same tone at 44.1 kHz in stereo and at 8 kHz, which mtmd's helper resamples to the
    # model's 16 kHz mono: all but the native clip's answer, unlike another tone's
    other = distance(heard(sine_wav(1000)), native)
    assert distance(heard(sine_wav(440, rate=44100, channels=2)), native) < other / 5
    assert distance(heard(sine_wav(440, rate=8000)), native) < other / 5


def distance(a: dict[str, float], b: dict[str, float]) -> float:
    """The mean difference of two answers' logprobs over the tokens both list."""
    shared = a.keys() & b.keys()
    assert len(shared) >= 10
    return sum(abs(a[t] - b[t]) for t in shared) / len(shared)


def test_an_image_for_the_model_that_only_hears_is_refused(tiny: Tiny) -> None:
    fixture, backend = tiny
    with pytest.raises(InvalidRequestError, match="hears but does not see"):
        done(backend, ask("What is this?", decode_image(png(1, 64))))
    # the engine goes on serving
    assert done(backend, ask("And this?", decode_audio(sine_wav(220)))).stats.media_tokens > 0
