"""Audio through `ember serve` and the official openai client: an `input_audio` part (a WAV
clip, base64) on chat completions and on Responses reaches a model that hears (the tiny
Qwen2-Audio of tests/support/tiny_audio.py, random weights, imported with its projector as a
user's model is) and its tokens count in the usage; an image for that model is a 400 that
says it does not see, and the server goes on serving."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from app.store import InstalledModel, Store
from tests.support.images import RED, b64, data_url
from tests.support.live_server import live_server
from tests.support.tiny_audio import TinyAudioModel, sine_wav
from tests.support.vision_store import install_tiny_audio

Hearing = tuple[Store, InstalledModel, TinyAudioModel]


@pytest.fixture(scope="module")
def hearing(tmp_path_factory: pytest.TempPathFactory) -> Hearing:
    return install_tiny_audio(tmp_path_factory.mktemp("audio") / "home")


@pytest.fixture(scope="module")
def oai(hearing: Hearing) -> Iterator[openai.OpenAI]:
    with live_server(hearing[0]) as (url, _):
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                            timeout=600)


def listen(oai: openai.OpenAI, model: str, clip: bytes) -> openai.types.chat.ChatCompletion:
    return oai.chat.completions.create(
        model=model, max_tokens=2, temperature=0, logprobs=True, top_logprobs=5, messages=[{
            "role": "user", "content": [
                {"type": "input_audio", "input_audio": {"data": b64(clip), "format": "wav"}},
                {"type": "text", "text": "What do you hear?"}]}])


def top(answer: openai.types.chat.ChatCompletion) -> list[tuple[str, float]]:
    assert answer.choices[0].logprobs and answer.choices[0].logprobs.content
    return [(t.token, round(t.logprob, 5))
            for t in answer.choices[0].logprobs.content[0].top_logprobs]


def test_an_input_audio_part_reaches_the_model_that_hears(oai: openai.OpenAI,
                                                          hearing: Hearing) -> None:
    _, model, tiny = hearing
    first = listen(oai, model.id, sine_wav(440))
    again = listen(oai, model.id, sine_wav(440))
    other = listen(oai, model.id, sine_wav(1000))
    assert first.usage is not None and first.usage.prompt_tokens > tiny.clip_tokens
    assert top(first) == top(again)
    assert top(first) != top(other)
    # the SDK's Responses types have no input_audio part (Ember's schema takes one)
    response = oai.responses.create(model=model.id, max_output_tokens=16, input=[{  # type: ignore[misc, list-item]
        "role": "user", "content": [
            {"type": "input_text", "text": "What do you hear?"},
            {"type": "input_audio", "input_audio": {"data": b64(sine_wav(440)),
                                                    "format": "wav"}}]}])
    assert response.usage is not None and response.usage.input_tokens > tiny.clip_tokens


def test_an_image_for_the_model_that_hears_is_a_400_and_it_goes_on(oai: openai.OpenAI,
                                                                   hearing: Hearing) -> None:
    model = hearing[1].id
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=model, max_tokens=2, messages=[{
            "role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": data_url(RED)}}]}])
    message = e.value.body["message"]  # type: ignore[index]
    assert model in message and "does not see" in message, message
    assert listen(oai, model, sine_wav(220)).choices[0].finish_reason in ("stop", "length")
