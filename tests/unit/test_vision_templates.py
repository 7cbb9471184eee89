"""The real chat templates of the vision families, rendered through Ember's renderer with user
turns that carry images: each image's MEDIA_MARKER (which mtmd replaces with the image's
tokens) lands inside its own user turn, exactly once, between the text before it and the text
after it, as the model was trained to see an image."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from backends.base import GenerationRequest, Message
from backends.media import MEDIA_MARKER, Media
from tests.support.families import chat

pytestmark = pytest.mark.unit

PIXEL = Media("image", b"\x00\x00\x00", 1, 1, source_format="PNG")


@dataclass(frozen=True)
class VisionTemplate:
    name: str  # tests/data/templates (tests/data/templates/SOURCES.md)
    bos: str
    user_open: str  # what opens a user turn
    turn_close: str  # what closes it


TEMPLATES = [
    VisionTemplate("google-gemma-3-it", "<bos>", "<start_of_turn>user\n", "<end_of_turn>"),
    VisionTemplate("Qwen-Qwen2.5-VL-7B-Instruct", "", "<|im_start|>user\n", "<|im_end|>"),
    VisionTemplate("HuggingFaceTB-SmolVLM2-2.2B-Instruct", "<|im_start|>", "User:",
                   "<end_of_utterance>"),
]


def render(t: VisionTemplate, messages: tuple[Message, ...]) -> str:
    template = chat(t.name, bos=t.bos)
    return template.render(messages, GenerationRequest(messages=messages))


def user_turns(t: VisionTemplate, prompt: str) -> list[str]:
    """The text of each user turn of a rendered prompt, in order."""
    turns = []
    for piece in prompt.split(t.user_open)[1:]:
        assert t.turn_close in piece, f"a user turn that never closes: {piece!r}"
        turns.append(piece.split(t.turn_close, 1)[0])
    return turns


def image_turn(text_before: str, text_after: str, images: int = 1) -> Message:
    markers = " ".join([MEDIA_MARKER] * images)
    return Message("user", f"{text_before} {markers} {text_after}", media=(PIXEL,) * images)


@pytest.mark.parametrize("t", TEMPLATES, ids=lambda t: t.name)
def test_image_marker_lands_once_inside_its_user_turn_in_order(t: VisionTemplate) -> None:
    prompt = render(t, (image_turn("What is in", "this picture?"),))
    assert prompt.count(MEDIA_MARKER) == 1
    (turn,) = user_turns(t, prompt)
    assert turn.index("What is in") < turn.index(MEDIA_MARKER) < turn.index("this picture?")


@pytest.mark.parametrize("t", TEMPLATES, ids=lambda t: t.name)
def test_two_images_in_one_turn_keep_their_order_with_the_text(t: VisionTemplate) -> None:
    prompt = render(t, (Message("user", f"First {MEDIA_MARKER} then {MEDIA_MARKER} compare.",
                                media=(PIXEL, PIXEL)),))
    assert prompt.count(MEDIA_MARKER) == 2
    (turn,) = user_turns(t, prompt)
    first = turn.index(MEDIA_MARKER)
    second = turn.index(MEDIA_MARKER, first + 1)
    assert turn.index("First") < first < turn.index("then") < second < turn.index("compare.")


@pytest.mark.parametrize("t", TEMPLATES, ids=lambda t: t.name)
def test_each_turns_image_stays_in_that_turn_of_a_conversation(t: VisionTemplate) -> None:
    messages = (Message("system", "You describe pictures."),
                image_turn("Describe", "briefly."),
                Message("assistant", "A red square."),
                image_turn("And", "this one?"))
    prompt = render(t, messages)
    assert prompt.count(MEDIA_MARKER) == 2
    first, second = user_turns(t, prompt)
    assert first.count(MEDIA_MARKER) == second.count(MEDIA_MARKER) == 1
    assert first.index("Describe") < first.index(MEDIA_MARKER) < first.index("briefly.")
    assert second.index("And") < second.index(MEDIA_MARKER) < second.index("this one?")
    assert prompt.index("A red square.") < prompt.index(second)


def test_template_that_reads_only_content_parts_gets_every_turns_text() -> None:
    """SmolVLM's template loops over a turn's content as parts: Ember's plain-string contents
    rendered as nothing until the renderer gave it one text part per turn."""
    smolvlm = next(t for t in TEMPLATES if "SmolVLM" in t.name)
    messages = (Message("user", "Hello."), Message("assistant", "Hi!"),
                image_turn("What is", "this?"))
    assert render(smolvlm, messages) == (
        "<|im_start|>User: Hello.<end_of_utterance>\nAssistant: Hi!<end_of_utterance>\n"
        f"User: What is {MEDIA_MARKER} this?<end_of_utterance>\nAssistant:")
