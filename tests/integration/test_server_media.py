"""Images through `ember serve` and the official clients (openai: chat completions and
Responses; anthropic; ollama: chat and generate), against the real text model Qwen2.5-Coder
0.5B: an image for it is a 400 naming the model on every dialect, a broken, huge or
unsupported image a 400 that says so (with the limit or the formats), and the server answers
the next plain request. One server for the module.

A seeing model answering an image (the engine's side, issue 42) plugs in as one fixture,
`vision_model`, once the tiny vision model of tests/support/tiny_vision.py is installable as
a store model: TODO(issue 42) add it and the answer tests beside the refusals below (the same
EVERY_DIALECT requests, expecting 200 and usage counting the image's tokens)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import anthropic
import ollama
import openai
import pytest

from app.runtime import Runtime
from tests.support.images import BAD_IMAGES, RED, b64, data_url
from tests.support.live_server import live_server
from tests.support.models import QWEN

HUGE = b"\x89PNG\r\n\x1a\n" + b"\0" * (21 * 1024 * 1024)  # 21 MB: over the 20 MB limit
TEXT_ONLY = (f"model {QWEN} reads text only: it has no vision projector (mmproj), so it "
             "cannot take the request's 1 image")
QUESTION = "What is in this picture?"


@pytest.fixture(scope="module")
def server(store, qwen) -> Iterator[tuple[str, Runtime]]:
    with live_server(store) as s:
        yield s


@pytest.fixture(scope="module")
def oai(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server[0] + "/v1", api_key="unused", max_retries=0,
                         timeout=600)


@pytest.fixture(scope="module")
def claude(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server[0], api_key="unused", max_retries=0,
                               timeout=600)


@pytest.fixture(scope="module")
def oll(server) -> ollama.Client:
    return ollama.Client(host=server[0], timeout=600)


def chat(oai: openai.OpenAI, raw: bytes) -> str:
    try:
        oai.chat.completions.create(model=QWEN, max_tokens=4, messages=[{
            "role": "user", "content": [{"type": "text", "text": QUESTION},
                                        {"type": "image_url",
                                         "image_url": {"url": data_url(raw)}}]}])
    except openai.BadRequestError as e:
        return e.body["message"]  # type: ignore[index]
    raise AssertionError("the image was not refused")


def responses(oai: openai.OpenAI, raw: bytes) -> str:
    try:
        oai.responses.create(model=QWEN, max_output_tokens=16, input=[{
            "role": "user", "content": [{"type": "input_text", "text": QUESTION},
                                        {"type": "input_image", "image_url": data_url(raw),
                                         "detail": "auto"}]}])
    except openai.BadRequestError as e:
        return e.body["message"]  # type: ignore[index]
    raise AssertionError("the image was not refused")


def messages(claude: anthropic.Anthropic, raw: bytes) -> str:
    try:
        claude.messages.create(model=QWEN, max_tokens=4, messages=[{
            "role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": b64(raw)}},
                {"type": "text", "text": QUESTION}]}])
    except anthropic.BadRequestError as e:
        assert e.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        return e.body["error"]["message"]  # type: ignore[index]
    raise AssertionError("the image was not refused")


def ollama_chat(oll: ollama.Client, raw: bytes) -> str:
    with pytest.raises(ollama.ResponseError) as e:
        oll.chat(model=QWEN, messages=[{"role": "user", "content": QUESTION, "images": [raw]}],
                 options={"num_predict": 4})
    assert e.value.status_code == 400
    return e.value.error


def ollama_generate(oll: ollama.Client, raw: bytes) -> str:
    with pytest.raises(ollama.ResponseError) as e:
        oll.generate(model=QWEN, prompt=QUESTION, images=[raw], options={"num_predict": 4})
    assert e.value.status_code == 400
    return e.value.error


DIALECTS: dict[str, Callable[..., str]] = {
    "chat": chat, "responses": responses, "messages": messages, "ollama_chat": ollama_chat,
    "ollama_generate": ollama_generate}


def client_for(name: str, oai, claude, oll):
    return {"chat": oai, "responses": oai, "messages": claude}.get(name, oll)


def answers_plainly(oai: openai.OpenAI) -> None:
    """The server still serves: a plain request gets its answer."""
    answer = oai.chat.completions.create(model=QWEN, max_tokens=4, temperature=0, messages=[
        {"role": "user", "content": "Say hi."}])
    assert answer.choices[0].message.content and answer.usage is not None
    assert answer.usage.completion_tokens >= 1


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_image_for_the_text_model_is_a_400_naming_it(dialect, oai, claude, oll):
    message = DIALECTS[dialect](client_for(dialect, oai, claude, oll), RED)
    assert message.startswith(TEXT_ONLY), message
    answers_plainly(oai)


@pytest.mark.parametrize(("raw", "words"), [*BAD_IMAGES, (HUGE, "is over 20 MB")],
                         ids=["broken", "not-an-image", "too-many-pixels", "tiff", "huge"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_bad_image_is_a_400_that_says_what_is_wrong(dialect, raw, words, oai, claude, oll):
    message = DIALECTS[dialect](client_for(dialect, oai, claude, oll), raw)
    assert words in message, message


def test_the_server_answers_after_every_refusal(oai, server):
    answers_plainly(oai)
    (loaded,) = server[1].loaded()  # the model stayed loaded: no refusal reached its worker
    assert loaded.model.id == QWEN


def test_a_literal_marker_in_the_text_is_read_as_text_by_the_model(oai):
    answer = oai.chat.completions.create(model=QWEN, max_tokens=4, temperature=0, messages=[
        {"role": "user", "content": "Repeat exactly: <__media__>"}])
    assert answer.usage is not None and answer.usage.prompt_tokens > 10
