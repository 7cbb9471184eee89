"""Images on every API of `ember serve`, through the official clients, on the tiny Gemma 3
vision model (random weights in the real layout, imported with its projector as a user
would: tests/support/vision_store.py): OpenAI chat `image_url`, Responses `input_image`,
Anthropic `image` blocks, Ollama `images` on chat and generate. The answer follows the image
(its first token's log-probabilities differ between two images and match for the same one),
the image's tokens count in `usage`, the same image again comes from the cache, and bad
images are 400s that leave the server serving."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path

import anthropic
import ollama
import openai
import pytest
from PIL import Image

from app.store import InstalledModel
from tests.support.live_server import live_server
from tests.support.tiny_vision import TinyVisionModel
from tests.support.vision_store import install_tiny_vision


def png(seed: int, size: int = 224) -> bytes:
    img = Image.new("RGB", (size, size))
    for y in range(0, size, 16):
        shade = (seed * 97 + y) % 256
        img.paste(((shade * 3) % 256, shade, 255 - shade), (0, y, size, y + 16))
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def data_url(raw: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(raw).decode()}"


@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[str, InstalledModel, TinyVisionModel]]:
    home = tmp_path_factory.mktemp("vision") / "home"
    store, model, tiny = install_tiny_vision(home)
    with live_server(store) as (url, _):
        yield url, model, tiny


@pytest.fixture(scope="module")
def oai(vision) -> openai.OpenAI:
    return openai.OpenAI(base_url=vision[0] + "/v1", api_key="unused", max_retries=0,
                         timeout=300)


def chat_image(client: openai.OpenAI, model: str, raw: bytes, question: str = "What is this?"):
    return client.chat.completions.create(
        model=model, temperature=0, max_tokens=3, logprobs=True, top_logprobs=5,
        messages=[{"role": "user", "content": [
            {"type": "text", "text": question},
            {"type": "image_url", "image_url": {"url": data_url(raw)}}]}])


def top(response) -> list[tuple[str, float]]:
    return [(t.token, round(t.logprob, 4))
            for t in response.choices[0].logprobs.content[0].top_logprobs]


def test_openai_chat_image_url_reaches_the_model(vision, oai):
    _, model, tiny = vision
    a1 = chat_image(oai, model.ref, png(1))
    a2 = chat_image(oai, model.ref, png(1))
    b = chat_image(oai, model.ref, png(2))
    assert top(a1) == top(a2)
    assert top(a1) != top(b)
    text_only = oai.chat.completions.create(
        model=model.ref, temperature=0, max_tokens=3,
        messages=[{"role": "user", "content": "What is this?"}])
    assert a1.usage.prompt_tokens >= text_only.usage.prompt_tokens + tiny.image_tokens
    # the same image and question again: its prompt, image included, is in the cache
    assert a2.usage.prompt_tokens_details.cached_tokens >= tiny.image_tokens


def test_responses_input_image(vision, oai):
    _, model, tiny = vision
    response = oai.responses.create(
        model=model.ref, max_output_tokens=16, temperature=0,
        input=[{"role": "user", "content": [
            {"type": "input_text", "text": "Describe it."},
            {"type": "input_image", "image_url": data_url(png(3))}]}])
    assert response.status in ("completed", "incomplete")
    assert response.usage.input_tokens > tiny.image_tokens


def test_anthropic_image_block(vision):
    url, model, tiny = vision
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=300)
    message = client.messages.create(
        model=model.ref, max_tokens=3, extra_body={"temperature": 0},
        messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(png(4)).decode()}},
            {"type": "text", "text": "What is this?"}]}])
    assert message.usage.input_tokens > tiny.image_tokens


def test_ollama_images_on_chat_and_generate(vision):
    url, model, tiny = vision
    client = ollama.Client(host=url)
    chat = client.chat(model=model.ref, options={"temperature": 0, "num_predict": 3},
                       messages=[{"role": "user", "content": "What is this?",
                                  "images": [png(5)]}])
    assert chat.prompt_eval_count > tiny.image_tokens
    generated = client.generate(model=model.ref, prompt="Describe:", images=[png(6)],
                                options={"temperature": 0, "num_predict": 3})
    assert generated.prompt_eval_count > tiny.image_tokens
    shown = client.show(model.ref)
    assert "vision" in (shown.capabilities or [])


def test_bad_images_are_400s_and_the_server_goes_on(vision, oai):
    _, model, _ = vision
    cases = {
        "broken": data_url(png(7)[:60]),
        "not an image": data_url(b"hello, world, this is text", "image/png"),
        "bad base64": "data:image/png;base64,@@@not-base64@@@",
        "url not allowed": "http://127.0.0.1:1/secret.png",
    }
    for name, url in cases.items():
        with pytest.raises(openai.BadRequestError) as refused:
            oai.chat.completions.create(
                model=model.ref, max_tokens=2, messages=[{"role": "user", "content": [
                    {"type": "text", "text": "?"},
                    {"type": "image_url", "image_url": {"url": url}}]}])
        assert refused.value.status_code == 400, name
    huge = Image.new("RGB", (8000, 7000))
    out = io.BytesIO()
    huge.save(out, "PNG")
    with pytest.raises(openai.BadRequestError, match="million pixels"):
        chat_image(oai, model.ref, out.getvalue())
    assert chat_image(oai, model.ref, png(8)).usage.prompt_tokens > 0


def test_a_jpeg_and_a_webp_read_like_the_png(vision, oai, tmp_path: Path):
    _, model, _ = vision
    img = Image.open(io.BytesIO(png(9)))
    answers = []
    for fmt in ("PNG", "WEBP"):  # both lossless: the same pixels
        out = io.BytesIO()
        img.save(out, fmt, **({"lossless": True} if fmt == "WEBP" else {}))
        answers.append(top(chat_image(oai, model.ref, out.getvalue())))
    assert answers[0] == answers[1]
    out = io.BytesIO()
    img.save(out, "JPEG", quality=95)
    assert chat_image(oai, model.ref, out.getvalue()).usage.prompt_tokens > 0


def test_ember_as_a_remote_endpoint_gets_the_images_as_content_parts(vision):
    """A remote model (or the Ember service a window joins) is sent a chat's images as
    OpenAI content parts (backends/remote.py): Ember's own server reads them, and the
    answer follows the image as it does locally."""
    from backends.base import DoneEvent, GenerationRequest, Message, SamplingParams
    from backends.media import MEDIA_MARKER, decode_image
    from backends.remote import Endpoint, RemoteBackend

    url, model, tiny = vision
    client = RemoteBackend(Endpoint("ember", url + "/v1", None))
    try:
        def ask(seed: int) -> DoneEvent:
            request = GenerationRequest(
                messages=(Message("user", MEDIA_MARKER + "What is this?",
                                  media=(decode_image(png(seed)),)),),
                sampling=SamplingParams(temperature=0.0, max_tokens=4))
            *_, done = client.generate(model.ref, request)
            assert isinstance(done, DoneEvent), done
            return done
        a1, a2 = ask(11), ask(11)
        assert a1.stats.prompt_tokens > tiny.image_tokens
        assert a1.text == a2.text
        assert a2.stats.cached_tokens >= tiny.image_tokens
    finally:
        client.close()
