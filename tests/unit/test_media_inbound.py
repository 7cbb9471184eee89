"""Images and audio on every API dialect, without a model: each wire's parts become
Message.media with a marker where each stands, in order (app.server.media_inbound and the
dialects' inbound modules); client text with a literal marker stays text; every bad input is
a 400 in the dialect's shape that says what is wrong (and the limit, or the formats); a model
without a projector, or a remote one, is refused by name; the server answers the next request.
The app runs on tests/support/fake_runtime.py's scripted Runtime (`sees`: a model with a
projector); the real model's refusals are in tests/integration/test_server_media.py."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from PIL import Image

from app.server.anthropic.inbound import anthropic_messages
from app.server.anthropic.schemas import MessageIn
from app.server.media_inbound import MediaSource
from app.server.ollama.inbound import ollama_messages
from app.server.ollama.schemas import OllamaMessage
from app.server.openai.inbound import openai_messages
from app.server.openai.schemas import ChatMessage
from app.server.responses.inbound import responses_messages
from app.server.responses.schemas import ResponseCreateRequest
from backends.base import GenerationRequest, Message, media_of
from backends.errors import InvalidRequestError
from backends.media import MAX_MEDIA_PER_REQUEST, MediaError, decode_image
from backends.media import MEDIA_MARKER as M
from tests.support.fake_runtime import MODEL, ScriptedRuntime, served
from tests.support.images import BAD_IMAGES, BLUE, BROKEN, RED, b64, data_url, png, wav

LITERAL = f"what does {M} mean?"  # a client's text that names the marker


def oai(*messages: dict, media: MediaSource | None = None) -> tuple[Message, ...]:
    return openai_messages([ChatMessage(**m) for m in messages], media)


def image_part(raw: bytes, media_type: str = "image/png") -> dict:
    return {"type": "image_url", "image_url": {"url": data_url(raw, media_type),
                                               "detail": "high"}}


def pixel(message: Message, index: int) -> tuple[int, int, int]:
    media = message.media[index]
    return tuple(Image.frombytes("RGB", (media.width, media.height), media.data).getpixel(
        (0, 0)))  # type: ignore[return-value]


# ---------------------------------------------------------------------------- OpenAI chat
def test_openai_parts_keep_their_order_with_a_marker_per_image():
    (m,) = oai({"role": "user", "content": [
        {"type": "text", "text": "Compare "}, image_part(RED), {"type": "text", "text": " with "},
        image_part(BLUE)]})
    assert m.content == f"Compare {M} with {M}"
    assert [x.kind for x in m.media] == ["image", "image"]
    assert pixel(m, 0) == (220, 20, 20) and pixel(m, 1) == (20, 20, 220)
    assert m.media[0].digest != m.media[1].digest and (m.media[0].width, m.media[0].height) \
        == (8, 8)
    GenerationRequest(messages=(m,)).validate()  # one marker per image: a valid request


def test_openai_image_url_as_a_bare_string_and_audio_parts_are_read():
    (m,) = oai({"role": "user", "content": [
        {"type": "image_url", "image_url": data_url(RED)},
        {"type": "input_audio", "input_audio": {"data": b64(wav()), "format": "wav"}},
        {"type": "text", "text": "What do you see and hear?"}]})
    assert m.content == f"{M}{M}What do you see and hear?"
    assert [(x.kind, x.source_format) for x in m.media] == [("image", "PNG"), ("audio", "wav")]


def test_a_literal_marker_in_client_text_stays_text_everywhere():
    messages = oai({"role": "system", "content": LITERAL},
                   {"role": "user", "content": [{"type": "text", "text": LITERAL}]},
                   {"role": "assistant", "content": LITERAL, "reasoning_content": LITERAL},
                   {"role": "user", "content": LITERAL})
    assert all(M not in m.content and M not in m.reasoning and not m.media for m in messages)
    assert "what does <__media" in messages[0].content  # the text is still there to read
    GenerationRequest(messages=messages).validate()
    (anth,) = anthropic_messages(None, [MessageIn(role="user", content=LITERAL)])
    (olla,) = ollama_messages([OllamaMessage(role="user", content=LITERAL)])
    (resp,) = responses_messages(LITERAL)
    assert not any(M in m.content for m in (anth, olla, resp))


@pytest.mark.parametrize(("raw", "words"), BAD_IMAGES)
def test_openai_bad_images_are_named_by_their_place(raw, words):
    with pytest.raises(MediaError) as e:
        oai({"role": "user", "content": [{"type": "text", "text": "x"}, image_part(raw)]})
    assert str(e.value).startswith("messages[0].content[1].image_url.url ") and words in str(
        e.value), e.value
    assert e.value.param == "messages[0].content[1].image_url.url"


@pytest.mark.parametrize(("part", "words"), [
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@@"}},
     "is not valid base64"),
    ({"type": "image_url", "image_url": {"url": "ftp://example.com/x.png"}},
     "must be a base64 data URL (data:image/png;base64,...) or an http(s) URL"),
    ({"type": "image_url", "image_url": {"url": "https://example.com/x.png"}},
     "this server does not fetch image URLs (a request would make it reach into your "
     "network): send the image inline as a base64 data URL (data:image/png;base64,...), or "
     "start `ember serve --allow-media-urls`"),
    ({"type": "image_url"}, "an image_url part needs its image_url"),
    ({"type": "input_audio", "input_audio": {"data": b64(wav()), "format": "ogg"}},
     "audio format 'ogg' is not one Ember reads (wav, mp3, flac)"),
    ({"type": "input_audio", "input_audio": {"data": b64(RED), "format": "wav"}},
     "is not audio Ember reads (formats: wav, mp3, flac)"),
])
def test_openai_bad_parts_say_what_is_wrong(part, words):
    with pytest.raises(MediaError) as e:
        oai({"role": "user", "content": [part]})
    assert str(e.value).startswith("messages[0].content[0]") and words in str(e.value), e.value


def test_a_huge_image_is_refused_before_it_is_decoded_with_the_limit_named():
    huge = "A" * (21 * 1024 * 1024 * 4 // 3)  # 21 MB as base64
    with pytest.raises(MediaError, match="is over 20 MB"):
        oai({"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + huge}}]})


def test_images_go_in_user_turns_only():
    with pytest.raises(MediaError, match="images and audio go in user turns .*not in a system"):
        oai({"role": "system", "content": [image_part(RED)]}, {"role": "user", "content": "x"})


def test_more_images_than_a_request_may_hold_are_refused_before_the_rest_are_decoded():
    parts = [image_part(RED)] * (MAX_MEDIA_PER_REQUEST + 1)
    with pytest.raises(MediaError) as e:
        oai({"role": "user", "content": parts})
    assert e.value.param == f"messages[0].content[{MAX_MEDIA_PER_REQUEST}].image_url.url"
    assert f"more than {MAX_MEDIA_PER_REQUEST} images" in str(e.value)


# ---------------------------------------------------------------------------- Responses
def responses(*content: dict, role: str = "user") -> tuple[Message, ...]:
    body = ResponseCreateRequest(model=MODEL, input=[{"role": role, "content": list(content)}])
    return responses_messages(body.input)


def test_responses_input_image_and_input_audio_become_media_in_order():
    (m,) = responses({"type": "input_text", "text": "Look: "},
                     {"type": "input_image", "image_url": data_url(BLUE), "detail": "auto"},
                     {"type": "input_audio", "input_audio": {"data": b64(wav()),
                                                             "format": "wav"}})
    assert m.content == f"Look: {M}{M}" and [x.kind for x in m.media] == ["image", "audio"]
    assert pixel(m, 0) == (20, 20, 220)


def test_responses_refuses_file_ids_and_images_in_assistant_turns():
    with pytest.raises(MediaError) as e:
        responses({"type": "input_image", "file_id": "file-123"})
    assert e.value.param == "input[0].content[0].file_id"
    assert "file_id images (OpenAI's Files API) are not supported" in str(e.value)
    with pytest.raises(MediaError) as e:
        responses({"type": "input_image", "image_url": data_url(BROKEN)})
    assert str(e.value).startswith("input[0].content[0].image_url is broken")


def test_a_function_output_may_carry_a_screenshot():
    body = ResponseCreateRequest(model=MODEL, input=[
        {"role": "user", "content": "Take a screenshot"},
        {"type": "function_call", "call_id": "c1", "name": "screenshot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_text", "text": "here:"},
            {"type": "input_image", "image_url": data_url(RED)}]}])
    tool = responses_messages(body.input)[-1]
    assert (tool.role, tool.content, len(tool.media)) == ("tool", f"here:{M}", 1)


# ---------------------------------------------------------------------------- Anthropic
def anth(*content: dict, role: str = "user") -> tuple[Message, ...]:
    return anthropic_messages(None, [MessageIn(role=role, content=list(content))])


def image_block(raw: bytes, media_type: str = "image/png") -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                        "data": b64(raw)}}


def test_anthropic_image_blocks_stand_between_text_blocks():
    (m,) = anth(image_block(RED), {"type": "text", "text": "and"}, image_block(BLUE))
    assert m.content == f"{M}\n\nand\n\n{M}" and pixel(m, 1) == (20, 20, 220)


@pytest.mark.parametrize(("block", "where", "words"), [
    (image_block(RED, "image/tiff"), "messages[0].content[0].source",
     "media_type 'image/tiff' is not an image type Ember reads (image/png, image/jpeg, "
     "image/gif, image/webp, image/bmp)"),
    ({"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
     "messages[0].content[0].source.url", "this server does not fetch image URLs"),
    ({"type": "image", "source": {"type": "file", "file_id": "file_1"}},
     "messages[0].content[0].source.type",
     "image sources of type 'file' are not supported (Ember takes base64 and url)"),
    ({"type": "image"}, "messages[0].content[0].source", "an image block needs its source"),
    ({"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}},
     "messages[0].content[0]", "document blocks are not supported yet"),
] + [(image_block(raw), "messages[0].content[0].source.data", words)
     for raw, words in BAD_IMAGES])
def test_anthropic_bad_image_blocks_say_what_is_wrong(block, where, words):
    with pytest.raises(InvalidRequestError) as e:
        anth(block)
    assert str(e.value).startswith(where) and words in str(e.value), e.value


def test_an_anthropic_tool_result_carries_its_screenshot_and_an_error_reads_as_one():
    messages = anthropic_messages(None, [
        MessageIn(role="user", content="Take a screenshot"),
        MessageIn(role="assistant", content=[{"type": "tool_use", "id": "t1",
                                              "name": "screenshot", "input": {}}]),
        MessageIn(role="user", content=[
            {"type": "tool_result", "tool_use_id": "t1", "is_error": True,
             "content": [image_block(RED), {"type": "text", "text": "blurred"}]},
            {"type": "text", "text": "What is wrong?"}])])
    tool, user = messages[-2:]
    assert (tool.role, tool.content, len(tool.media)) == ("tool", f"Error: {M}\n\nblurred", 1)
    assert (user.content, user.media) == ("What is wrong?", ())


def test_an_image_in_an_assistant_turn_is_refused():
    with pytest.raises(MediaError, match=r"messages\[0\].content\[0\]: images go in user"):
        anth(image_block(RED), role="assistant")


# ---------------------------------------------------------------------------- Ollama
def test_ollama_images_go_before_the_content():
    (m,) = ollama_messages([OllamaMessage(role="user", content="Which is red?",
                                          images=[b64(BLUE), b64(RED)])])
    assert m.content == f"{M}{M}Which is red?" and pixel(m, 1) == (220, 20, 20)


@pytest.mark.parametrize(("raw", "words"), BAD_IMAGES)
def test_ollama_bad_images_are_named_by_their_index(raw, words):
    with pytest.raises(MediaError) as e:
        ollama_messages([OllamaMessage(role="user", content="x", images=[b64(RED), b64(raw)])])
    assert str(e.value).startswith("messages[0].images[1] ") and words in str(e.value)


# ---------------------------------------------------------------------------- through the app
def post(fake: ScriptedRuntime, path: str, body: dict, **settings: object):
    with served(fake, **settings) as client:
        return client.post(path, json=body)


CHAT = {"model": MODEL, "messages": [{"role": "user", "content": [
    {"type": "text", "text": "What is this?"}, image_part(RED)]}]}
RESPONSES = {"model": MODEL, "input": [{"role": "user", "content": [
    {"type": "input_text", "text": "What is this?"},
    {"type": "input_image", "image_url": data_url(RED)}]}]}
MESSAGES = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": [
    {"type": "text", "text": "What is this?"}, image_block(RED)]}]}
OLLAMA_CHAT = {"model": MODEL, "stream": False, "messages": [
    {"role": "user", "content": "What is this?", "images": [b64(RED)]}]}
OLLAMA_GENERATE = {"model": MODEL, "stream": False, "prompt": "What is this?",
                   "images": [b64(RED)]}
EVERY_DIALECT = [("/v1/chat/completions", CHAT), ("/v1/responses", RESPONSES),
                 ("/v1/messages", MESSAGES), ("/api/chat", OLLAMA_CHAT),
                 ("/api/generate", OLLAMA_GENERATE)]


def error_message(path: str, body: dict) -> str:
    """The message of an error body, in whichever shape its dialect answers."""
    if path.startswith("/api/"):
        return body["error"]
    if path == "/v1/messages":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    return body["error"]["message"]


@pytest.mark.parametrize(("path", "body"), EVERY_DIALECT)
def test_a_model_that_sees_gets_the_image_on_every_dialect(path, body):
    fake = ScriptedRuntime(sees=True)
    r = post(fake, path, body)
    assert r.status_code == 200, r.text
    (media,) = media_of(fake.requests[-1])
    assert (media.width, media.height, media.source_format) == (8, 8, "PNG")
    user = [m for m in fake.requests[-1].messages or () if m.role == "user"]
    text = user[-1].content if user else fake.requests[-1].prompt
    assert text is not None and text.count(M) == 1 and "What is this?" in text


@pytest.mark.parametrize(("path", "body"), EVERY_DIALECT)
def test_an_image_for_a_model_that_reads_text_only_is_a_400_naming_it(path, body):
    fake = ScriptedRuntime()  # no projector
    with served(fake) as client:
        r = client.post(path, json=body)
        assert r.status_code == 400, r.text
        assert error_message(path, r.json()).startswith(
            f"model {MODEL} reads text only: it has no vision projector (mmproj), so it "
            "cannot take the request's 1 image")
        assert not fake.requests  # nothing reached the model
        plain = client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "Hi"}]})
        assert plain.status_code == 200 and len(fake.requests) == 1  # still serving


@pytest.mark.parametrize(("path", "body"), EVERY_DIALECT)
def test_a_broken_image_is_a_400_in_the_dialects_shape(path, body):
    broken = json.loads(json.dumps(body).replace(b64(RED), b64(BROKEN)))
    r = post(ScriptedRuntime(sees=True), path, broken)
    assert r.status_code == 400, r.text
    assert "is broken" in error_message(path, r.json())


def test_a_model_with_a_projector_on_a_backend_without_media_is_refused_by_backend():
    class NoMediaBackend(ScriptedRuntime):
        def serving(self, name, backend=None, context=None):
            served_by = super().serving(name, backend, context)
            return replace(served_by, capabilities=replace(served_by.capabilities, media=False))

    r = post(NoMediaBackend(sees=True), "/v1/chat/completions", CHAT)
    assert r.status_code == 400 and "the llamacpp backend that runs tiny-chat does not take " \
        "images or audio" in r.json()["error"]["message"]


def test_a_raw_prompt_with_an_image_for_a_remote_model_is_refused():
    """A chat's images go to a remote model as content parts (its server says whether it
    sees); a raw prompt's have no wire to go on (/completions takes text)."""
    r = post(ScriptedRuntime(sees=True), "/api/generate",
             {**OLLAMA_GENERATE, "model": "lab/big", "raw": True, "images": [b64(RED)]})
    assert r.status_code == 400
    assert "a raw prompt cannot carry images or audio" in r.json()["error"]


def test_anthropic_count_tokens_refuses_an_image_for_a_text_model():
    r = post(ScriptedRuntime(), "/v1/messages/count_tokens",
             {k: v for k, v in MESSAGES.items() if k != "max_tokens"})
    assert r.status_code == 400 and "reads text only" in r.json()["error"]["message"]


def test_a_raw_generate_puts_the_markers_before_the_prompt():
    fake = ScriptedRuntime(sees=True)
    r = post(fake, "/api/generate", {**OLLAMA_GENERATE, "raw": True,
                                     "images": [b64(RED), b64(BLUE)]})
    assert r.status_code == 200, r.text
    request = fake.requests[-1]
    assert request.messages is None and request.prompt == f"{M}{M}What is this?"
    assert [m.digest for m in request.media] == [m.digest for m in media_of(request)]
    assert len(request.media) == 2


def test_a_raw_prompt_must_place_a_marker_per_image():
    image = decode_image(png())
    with pytest.raises(InvalidRequestError, match="places 0 media marker"):
        GenerationRequest(prompt="no marker", media=(image,)).validate()
    with pytest.raises(InvalidRequestError, match="go in its messages"):
        GenerationRequest(messages=(Message("user", "x"),), media=(image,)).validate()
    GenerationRequest(prompt=f"{M} one marker", media=(image,)).validate()
