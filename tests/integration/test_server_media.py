"""Images through `ember serve` and the official clients (openai: chat completions and
Responses; anthropic; ollama: chat and generate). Against the real text model Qwen2.5-Coder
0.5B: an image for it is a 400 naming the model on every dialect, a broken, huge or
unsupported image a 400 that says so (with the limit or the formats), and the server answers
the next plain request. Against a seeing model (`vision_model`: tests/support/tiny_vision.py's
tiny Gemma 3, random weights, imported with its projector as a user's model is): every
dialect's image reaches it and its tokens count in the usage, /api/show lists vision, and an
image URL is fetched from a loopback server when the server is started to fetch them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anthropic
import ollama
import openai
import pytest

from app.runtime import Runtime
from app.store import InstalledModel, Store
from tests.support.images import BAD_IMAGES, RED, b64, data_url, wav
from tests.support.live_server import live_server
from tests.support.models import QWEN
from tests.support.tiny_vision import TinyVisionModel
from tests.support.vision_store import install_tiny_vision

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


# ---------------------------------------------------------------------------- a model that sees
@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory
           ) -> tuple[Store, InstalledModel, TinyVisionModel]:
    return install_tiny_vision(tmp_path_factory.mktemp("vision") / "home")


@pytest.fixture(scope="module")
def vision_model(vision) -> InstalledModel:
    """The tiny Gemma 3 with its projector, imported as `ember import --mmproj` does."""
    assert vision[1].projector is not None
    return vision[1]


@pytest.fixture(scope="module")
def tiny_gemma(vision) -> TinyVisionModel:
    return vision[2]


class Pictures(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(RED)))
        self.end_headers()
        self.wfile.write(RED)


@pytest.fixture(scope="module")
def picture_url() -> Iterator[str]:
    site = ThreadingHTTPServer(("127.0.0.1", 0), Pictures)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{site.server_address[1]}/red.png"
    site.shutdown()
    site.server_close()


@pytest.fixture(scope="module")
def seeing(vision, vision_model) -> Iterator[str]:
    """A server on the vision store that fetches image URLs, loopback ones too."""
    with live_server(vision[0], media_urls=True, media_urls_private=True) as (url, _):
        yield url


def test_every_dialect_gives_the_seeing_model_its_image(seeing, vision_model, tiny_gemma):
    name, least = vision_model.id, tiny_gemma.image_tokens  # the prompt holds the image's
    oai = openai.OpenAI(base_url=seeing + "/v1", api_key="unused", max_retries=0, timeout=600)
    answer = oai.chat.completions.create(model=name, max_tokens=2, messages=[{
        "role": "user", "content": [{"type": "text", "text": QUESTION},
                                    {"type": "image_url", "image_url": {"url": data_url(RED)}}]}])
    assert answer.usage is not None and answer.usage.prompt_tokens > least
    response = oai.responses.create(model=name, max_output_tokens=16, input=[{
        "role": "user", "content": [{"type": "input_text", "text": QUESTION},
                                    {"type": "input_image", "image_url": data_url(RED)}]}])
    assert response.usage is not None and response.usage.input_tokens > least
    claude = anthropic.Anthropic(base_url=seeing, api_key="unused", max_retries=0, timeout=600)
    message = claude.messages.create(model=name, max_tokens=2, messages=[{
        "role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": b64(RED)}},
            {"type": "text", "text": QUESTION}]}])
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) > least
    counted = claude.messages.count_tokens(model=name, messages=[{
        "role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": b64(RED)}},
            {"type": "text", "text": QUESTION}]}])
    assert counted.input_tokens == message.usage.input_tokens + (
        message.usage.cache_read_input_tokens or 0)  # the image counted as it is generated
    oll = ollama.Client(host=seeing, timeout=600)
    chatted = oll.chat(model=name, options={"num_predict": 2}, messages=[
        {"role": "user", "content": QUESTION, "images": [RED]}])
    generated = oll.generate(model=name, prompt=QUESTION, images=[RED],
                             options={"num_predict": 2})
    raw = oll.generate(model=name, prompt=QUESTION, images=[RED], raw=True,
                       options={"num_predict": 2})
    # the whole prompt, or (a prefix already cached) at least the image's own tokens
    for done in (chatted, generated, raw):
        assert (done.prompt_eval_count or 0) > 0 and done.done
    assert "vision" in oll.show(name).capabilities


def test_the_seeing_model_gets_an_image_url_the_server_fetched(seeing, vision_model,
                                                                tiny_gemma, picture_url):
    oai = openai.OpenAI(base_url=seeing + "/v1", api_key="unused", max_retries=0, timeout=600)
    answer = oai.chat.completions.create(model=vision_model.id, max_tokens=2, messages=[{
        "role": "user", "content": [{"type": "text", "text": "And this one?"},
                                    {"type": "image_url", "image_url": {"url": picture_url}}]}])
    assert answer.usage is not None and answer.usage.prompt_tokens > tiny_gemma.image_tokens
    claude = anthropic.Anthropic(base_url=seeing, api_key="unused", max_retries=0, timeout=600)
    with pytest.raises(anthropic.BadRequestError) as e:  # no server on port 1
        claude.messages.create(model=vision_model.id, max_tokens=2, messages=[{
            "role": "user", "content": [{"type": "image", "source": {
                "type": "url", "url": "http://127.0.0.1:1/red.png"}}]}])
    assert "fetching the image failed" in e.value.body["error"]["message"]  # type: ignore[index]
    assert oai.chat.completions.create(model=vision_model.id, max_tokens=2, messages=[
        {"role": "user", "content": "Hi"}]).choices[0].finish_reason in ("stop", "length")


def test_a_seeing_model_that_does_not_hear_refuses_audio_with_a_400(seeing, vision_model):
    oai = openai.OpenAI(base_url=seeing + "/v1", api_key="unused", max_retries=0, timeout=600)
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model=vision_model.id, max_tokens=2, messages=[{
            "role": "user", "content": [{"type": "input_audio", "input_audio": {
                "data": b64(wav()), "format": "wav"}}, {"type": "text", "text": "Hear?"}]}])
