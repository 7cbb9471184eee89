"""Images in the chat session (app.chat): attached from a file or bytes, checked and decoded,
stored with the question, given to the model from history (a new session, a retry, an edit),
and a model that cannot see says so, naming the installed models that can. The real
Runtime, Store and history.db in tmp_path; a scripted remote model for an answer."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image

from app.chat.attachments import IMAGE_TOKENS_ESTIMATE, estimated_tokens
from app.chat.events import ChatEvent, MediaRefused
from app.chat.request import TurnOptions, build_request
from app.chat.session import ChatSession
from app.config import Paths
from app.history import History
from app.runtime import Runtime, endpoints
from app.runtime.thinking import ThinkingSupport
from app.store import Store
from backends.base import SamplingParams
from backends.media import MEDIA_MARKER, decode_image
from tests.support.fake_openai import fake_server
from tests.support.tiny_gguf import write_tiny_gguf
from tests.support.tiny_vision import write_tiny_gemma3_vision

OPTIONS = TurnOptions(SamplingParams(max_tokens=16), None)


def png(color: tuple[int, int, int], size: tuple[int, int] = (12, 8)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


RED, GREEN = png((255, 0, 0)), png((0, 255, 0))


@dataclass
class Lab:
    home: Paths
    runtime: Runtime
    history: History
    text_model: str  # installed, no projector
    vision_model: str  # installed with a projector beside it
    requests: list[dict]
    events: list[ChatEvent]

    def session(self, model: str, conversation_id: int | None = None) -> ChatSession:
        if conversation_id is None:
            conversation_id = self.history.create(model=model).id
        return ChatSession(self.history, self.runtime, conversation_id, model, OPTIONS,
                           home=self.home)

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]


def install(store: Store, tmp: Path, name: str, projector: bool) -> str:
    """A text model (a tiny GGUF), or the tiny Gemma 3 vision model imported with its
    projector as `ember import --mmproj` does (tests/support/tiny_vision.py)."""
    if projector:
        tiny = write_tiny_gemma3_vision(tmp / name)
        return store.import_gguf(tiny.model, projector=tiny.projector).ref
    return store.import_gguf(write_tiny_gguf(tmp / f"{name}.gguf", name=name)).ref


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    home = Paths(tmp_path / "home")
    home.home.mkdir(parents=True)
    store = Store(home)
    text_model = install(store, tmp_path, "Words Only", projector=False)
    vision_model = install(store, tmp_path, "Sees Things", projector=True)
    requests: list[dict] = []
    with fake_server(requests=requests) as url:
        endpoints.add("lab", url, paths=home)
        with Runtime(store=store) as rt:
            history = History(home.history_db)
            try:
                yield Lab(home, rt, history, text_model, vision_model, requests, [])
            finally:
                history.close()


def request_of(lab: Lab, session: ChatSession):
    return build_request(lab.history.get(session.conversation_id),
                         lab.history.messages(session.conversation_id), OPTIONS,
                         ThinkingSupport(), media=session.load_media)


def test_an_image_attached_to_a_model_that_sees_is_stored_and_given_to_it(lab, tmp_path):
    session = lab.session(lab.vision_model)
    (tmp_path / "shot.png").write_bytes(RED)
    from_file = session.attach(tmp_path / "shot.png", lab.events.append)
    pasted = session.attach(GREEN, lab.events.append)
    assert from_file is not None and pasted is not None and lab.events == []
    assert (from_file.name, from_file.kind, from_file.ext) == ("shot.png", "image", "png")
    assert (from_file.media.width, from_file.media.height) == (12, 8)
    question = session.ask("What <__media__> colours?", attachments=(from_file, pasted))
    assert question.content == "What <__media__> colours?"  # stored as typed
    assert [lab.history.read_media(m) for m in question.media] == [RED, GREEN]
    assert lab.history.get(session.conversation_id).title == "What <__media__> colours?"
    [message] = request_of(lab, session).messages
    # one marker per image, before the text; the typed marker is text, not an image
    assert message.content.count(MEDIA_MARKER) == 2
    assert message.content.startswith(f"{MEDIA_MARKER}\n{MEDIA_MARKER}\nWhat <__media")
    assert [m.data[:3] for m in message.media] == [b"\xff\x00\x00", b"\x00\xff\x00"]
    assert estimated_tokens([from_file, pasted]) == 2 * IMAGE_TOKENS_ESTIMATE


def test_a_new_session_an_edit_and_a_retry_give_the_images_from_history(lab):
    session = lab.session(lab.vision_model)
    red = session.attach(RED, lab.events.append)
    assert red is not None
    session.ask("", attachments=(red,))  # an image alone is a question
    assert lab.history.get(session.conversation_id).title == "Image: pasted image"
    # after a restart: decoded again from its file
    again = lab.session(lab.vision_model, session.conversation_id)
    [message] = request_of(lab, again).messages
    assert message.content == MEDIA_MARKER and message.media[0].data[:3] == b"\xff\x00\x00"
    # an edit keeps the question's images (a new version beside it)
    edited_q = again.ask("And now?", again.last_question())
    questions = [m for m in lab.history.all_messages(session.conversation_id)
                 if m.role == "user"]
    assert len(questions) == 2 and questions[0].media == questions[1].media == edited_q.media
    assert questions[0].parent_id == questions[1].parent_id is None
    [edited] = request_of(lab, again).messages
    assert edited.content == f"{MEDIA_MARKER}\nAnd now?" and len(edited.media) == 1
    # an edit with other images holds those instead
    green = again.attach(GREEN, lab.events.append)
    assert green is not None
    again.ask("This one?", again.last_question(), (green,))
    [replaced] = request_of(lab, again).messages
    assert replaced.media[0].data[:3] == b"\x00\xff\x00" and len(replaced.media) == 1


def test_an_image_for_a_model_that_cannot_see_names_the_models_that_can(lab):
    session = lab.session(lab.text_model)
    assert session.attach(RED, lab.events.append) is None
    [refused] = lab.of(MediaRefused)
    assert refused.seeing == (lab.vision_model,) and refused.model == lab.text_model
    assert refused.text == (f"{lab.text_model} cannot see images (it has no vision "
                            f"projector). Installed models that can: {lab.vision_model}.")
    assert lab.history.messages(session.conversation_id) == []


@pytest.mark.parametrize("data, said", [
    (b"", "pasted image is empty"),
    (b"not an image at all", "pasted image is not an image Ember reads (formats: PNG"),
    (png((9, 9, 9), (300, 300))[:70], "pasted image is broken"),
], ids=["empty", "not-an-image", "cut-short"])
def test_a_broken_image_is_a_clear_message_never_a_crash(lab, data: bytes, said: str):
    session = lab.session(lab.vision_model)
    assert session.attach(data, lab.events.append) is None
    [refused] = lab.of(MediaRefused)
    assert refused.text.startswith(f"Not attached: {said}")


def test_a_missing_file_is_a_clear_message(lab, tmp_path):
    session = lab.session(lab.vision_model)
    assert session.attach(tmp_path / "gone.png", lab.events.append) is None
    assert lab.of(MediaRefused)[0].text.startswith("Not attached: cannot read gone.png")


def test_a_chat_with_images_answered_by_a_model_that_cannot_see_is_told_in_words(lab):
    session = lab.session(lab.vision_model)
    red = session.attach(RED, lab.events.append)
    assert red is not None
    session.ask("What is it?", attachments=(red,))
    lab.history.add_message(session.conversation_id, "assistant", "A red square.")
    # the user switches the chat to a model that cannot see, and asks on
    other = lab.session("lab/ok", session.conversation_id)
    other.send("Are you sure?", lab.events.append)
    [refused] = lab.of(MediaRefused)
    assert "lab/ok is a remote model whose server does not list vision" in refused.text
    assert refused.seeing == (lab.vision_model,)
    sent = lab.requests[-1]["messages"]
    assert sent[0]["content"] == "[1 attachment not shown]\nWhat is it?"
    assert lab.history.messages(session.conversation_id)[-1].content == "Hello world"
    # a retry is rebuilt from history: the question still holds its image
    other.retry(lab.events.append)
    assert lab.requests[-1]["messages"][0] == sent[0]
    assert lab.history.messages(session.conversation_id)[0].media[0].kind == "image"


def test_a_remote_model_that_sees_gets_the_images_as_content_parts(lab):
    """A remote server that lists vision gets the question's image as an image_url part (a
    PNG of the same pixels), its text beside it (backends/media.openai_parts)."""
    session = lab.session(lab.vision_model)
    red = session.attach(RED, lab.events.append)
    assert red is not None
    session.ask("What is it?", attachments=(red,))
    lab.history.add_message(session.conversation_id, "assistant", "A red square.")
    other = lab.session("lab/sees", session.conversation_id)
    other.send("Are you sure?", lab.events.append)
    assert not lab.of(MediaRefused)
    parts = lab.requests[-1]["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["image_url", "text"]
    assert parts[1]["text"].strip() == "What is it?"
    url = parts[0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    sent = decode_image(base64.b64decode(url.split(",", 1)[1]))
    assert sent.digest == decode_image(RED).digest
    assert lab.history.messages(session.conversation_id)[-1].content == "Hello world"


# the terminal: `ember run --image` and `/image` in `ember chat`


@pytest.fixture
def installed(isolated_home: Paths, tmp_path: Path) -> tuple[str, str]:
    store = Store(isolated_home)
    return (install(store, tmp_path, "Words Only", projector=False),
            install(store, tmp_path, "Sees Things", projector=True))


def test_ember_run_with_an_image_for_a_text_model_names_the_models_that_see(installed,
                                                                             tmp_path):
    from click.testing import CliRunner

    from app.cli import cli

    text_model, vision_model = installed
    (tmp_path / "shot.png").write_bytes(RED)
    result = CliRunner().invoke(cli, ["run", text_model, "What is in this picture?",
                                      "--image", str(tmp_path / "shot.png")])
    assert result.exit_code != 0
    assert str(result.exception) == (f"{text_model} cannot see images (it has no vision "
                                     f"projector). Installed models that can: {vision_model}.")
    (tmp_path / "bad.png").write_bytes(b"GIF89a but not really")
    result = CliRunner().invoke(cli, ["run", vision_model, "And this?", "--image",
                                      str(tmp_path / "shot.png"), "--image",
                                      str(tmp_path / "bad.png")])
    assert str(result.exception) == ("bad.png is not an image Ember reads (formats: PNG, "
                                     "JPEG, GIF, WEBP, BMP)")


def test_the_chat_terminal_takes_an_image_for_the_next_message(installed, isolated_home,
                                                               tmp_path, monkeypatch,
                                                               capsys):
    from app.cli.chat_terminal import chat_loop

    text_model, vision_model = installed
    (tmp_path / "shot.png").write_bytes(RED)
    for model, typed in ((vision_model, f"/image {tmp_path / 'shot.png'}\n/image\n"),
                         (text_model, f"/image {tmp_path / 'shot.png'}\n")):
        lines = iter((typed + "/bye\n").splitlines())
        monkeypatch.setattr("builtins.input", lambda _prompt="", typed=lines: next(typed))
        with Runtime(store=Store(isolated_home)) as rt:
            chat_loop(rt, model, OPTIONS, None, False, str, isolated_home)
    out = capsys.readouterr().out
    assert "(image shot.png, PNG 12x8: sent with your next message)" in out
    assert "/image takes a file: /image screenshot.png" in out
    assert (f"({text_model} cannot see images (it has no vision projector). Installed "
            f"models that can: {vision_model}.)") in out
