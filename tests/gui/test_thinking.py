"""Thinking and tool calls in the window, driven like a user would: the real window and
Runtime, with a remote reasoning model (tests/support/fake_openai.py streams
`reasoning_content` then `content`, as vLLM and llama-server do for Qwen3 or R1)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.config import Paths
from app.gui import build_window
from app.gui.main_window import MainWindow
from app.runtime import Runtime, endpoints
from app.store import Store
from tests.support.fake_openai import ANSWER, THINKING, fake_server

WAIT_MS = 30_000
THOUGHT = "".join(THINKING)


class Fake:
    """The upstream, holding its answer back until `gate` (while the model thinks) and then
    after the first piece until `answer_gate` (while it answers)."""

    def __init__(self, url: str, requests: list[dict], gate: threading.Event,
                 answer_gate: threading.Event) -> None:
        self.url, self.requests, self.gate, self.answer_gate = url, requests, gate, answer_gate

    def release(self) -> None:
        self.gate.set()
        self.answer_gate.set()


@pytest.fixture
def fake() -> Iterator[Fake]:
    requests: list[dict] = []
    gate, answer_gate = threading.Event(), threading.Event()
    with fake_server(requests=requests, gate=gate, answer_gate=answer_gate) as url:
        yield Fake(url, requests, gate, answer_gate)
    gate.set()
    answer_gate.set()


@pytest.fixture
def window(qtbot, fake: Fake, tmp_path: Path) -> Iterator[MainWindow]:
    home = Paths(tmp_path / "home")
    endpoints.add("lab", fake.url, paths=home)
    with Runtime(store=Store(home)) as rt:
        w = build_window(home=home, runtime=rt)
        qtbot.addWidget(w)
        w.show()
        qtbot.waitUntil(lambda: w.model_picker.findData("lab/think") >= 0, timeout=WAIT_MS)
        w.show_chat()  # a home without local models opens on "Your machine"
        yield w
        fake.release()
        w.controller.stop(wait=True)


def pick(qtbot, w: MainWindow, ref: str) -> None:
    w.model_picker.setCurrentIndex(w.model_picker.findData(ref))
    qtbot.waitUntil(lambda: w.controller.choices.support_task is None
                    or w.controller.choices.support_task.wait(0), timeout=WAIT_MS)
    qtbot.wait(50)  # the task's answer is queued to the UI thread


def send(qtbot, w: MainWindow, text: str) -> None:
    w.chat.composer.setPlainText(text)
    qtbot.keyClick(w.chat.composer, Qt.Key.Key_Return)


def wait_idle(qtbot, w: MainWindow) -> None:
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=WAIT_MS)


def test_thinking_streams_open_then_folds_to_thought_for_n_seconds_when_the_answer_starts(
        qtbot, window: MainWindow, fake: Fake):
    pick(qtbot, window, "lab/think")
    send(qtbot, window, "Hi")
    # the answer is begun on the turn's thread: its widget comes with its first event
    qtbot.waitUntil(lambda: window.chat.messages[-1].role == "assistant", timeout=WAIT_MS)
    answer = window.chat.messages[-1]
    block = answer.thinking
    # the fake has streamed its thinking and holds the answer back: the model is thinking
    qtbot.waitUntil(lambda: block.body.text() == THOUGHT, timeout=WAIT_MS)
    assert block.isVisible() and block.expanded and block.title == "Thinking…"
    assert answer.text == "" and not answer.body.isVisible()
    assert window.controller.busy
    qtbot.wait(1100)  # think for a second
    fake.gate.set()
    # the answer's first piece has come, the rest is held back: the thinking has folded
    qtbot.waitUntil(lambda: answer.text == ANSWER[0], timeout=WAIT_MS)
    assert window.controller.busy and answer.body.isVisible()
    assert not block.expanded and re.fullmatch(r"Thought for [12] s", block.title)
    assert block.header.text() == block.title
    fake.answer_gate.set()
    wait_idle(qtbot, window)
    assert answer.text == "".join(ANSWER) and block.title == block.header.text()
    assert not block.expanded
    qtbot.mouseClick(block.header, Qt.MouseButton.LeftButton)  # open it again
    assert block.expanded and block.body.text() == THOUGHT
    qtbot.mouseClick(block.header, Qt.MouseButton.LeftButton)
    assert not block.expanded
    stored = window.history.messages(window.controller.conversation_id)[-1]
    assert (stored.content, stored.reasoning, stored.status) == ("".join(ANSWER), THOUGHT,
                                                                 "complete")
    assert stored.stats["thinking_s"] >= 1.0 and stored.stats["reasoning_tokens"] == 4
    assert "4 of them thinking" in answer.stats.text()


def test_thinking_is_reshown_from_history_and_given_back_to_the_model(
        qtbot, window: MainWindow, fake: Fake):
    fake.release()
    pick(qtbot, window, "lab/think")
    send(qtbot, window, "Hi")
    wait_idle(qtbot, window)
    conv = window.controller.conversation_id
    window.new_chat()
    assert window.chat.messages == []
    window.controller.open(conv)  # as a click in the conversation list does
    again = window.chat.messages[-1]
    qtbot.waitUntil(again.isVisible)  # new widgets show at the next turn of the event loop
    assert again.text == "".join(ANSWER) and again.thinking.isVisible()
    assert not again.thinking.expanded and again.thinking.title.startswith("Thought for ")
    qtbot.mouseClick(again.thinking.header, Qt.MouseButton.LeftButton)
    assert again.thinking.body.text() == THOUGHT
    send(qtbot, window, "And again")
    wait_idle(qtbot, window)
    sent = fake.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1] == {"role": "assistant", "content": "".join(ANSWER),
                       "reasoning_content": THOUGHT}


def test_the_think_control_shows_only_for_a_thinking_model_and_its_choice_is_the_chats(
        qtbot, window: MainWindow, fake: Fake):
    fake.release()
    pick(qtbot, window, "lab/ok")
    assert window.chat.think.isHidden()
    pick(qtbot, window, "lab/think")
    think = window.chat.think
    assert think.isVisible() and think.isEnabled()
    assert [think.itemText(i) for i in range(think.count())] == ["Think: on", "Think: off"]
    assert think.currentData() == "on"  # the model's default
    think.setCurrentIndex(1)  # the user picks "off" before the chat has any message
    think.activated.emit(1)
    send(qtbot, window, "Hi")
    wait_idle(qtbot, window)
    assert fake.requests[-1]["chat_template_kwargs"] == {"enable_thinking": False}
    answer = window.chat.messages[-1]
    assert answer.text == "".join(ANSWER) and answer.thinking.isHidden()
    conv = window.controller.conversation_id
    assert window.history.get(conv).thinking == "off"
    window.new_chat()  # a new chat starts at the model's default
    assert think.currentData() == "on" and window.history.get(
        window.controller.conversation_id).thinking is None
    send(qtbot, window, "Hi")
    wait_idle(qtbot, window)
    assert "chat_template_kwargs" not in fake.requests[-1]
    assert window.chat.messages[-1].thinking.isVisible()
    window.controller.open(conv)  # back to the first chat: its choice comes back
    assert think.currentData() == "off"
    pick(qtbot, window, "lab/ok")
    assert think.isHidden()


def test_the_tool_calls_of_an_answer_are_shown_and_stored(qtbot, window: MainWindow,
                                                          fake: Fake):
    fake.release()
    pick(qtbot, window, "lab/tool")
    send(qtbot, window, "Weather and time in Paris?")
    wait_idle(qtbot, window)
    answer = window.chat.messages[-1]
    shown = answer.tool_calls.text()
    assert answer.tool_calls.isVisible() and shown.splitlines() == [
        'Called get_weather({"city": "Paris", "unit": "°C"})',
        'Called get_time({"zone": "Europe/Paris"})']
    assert not answer.body.isVisible()  # no text: no empty box under the calls
    assert answer.thinking.title.startswith("Thought for ")
    stored = window.history.messages(window.controller.conversation_id)[-1]
    assert [c.name for c in stored.tool_calls] == ["get_weather", "get_time"]
    assert stored.stats["finish_reason"] == "tool_calls" and stored.status == "complete"
    window.controller.open(window.controller.conversation_id)
    reshown = window.chat.messages[-1]
    qtbot.waitUntil(reshown.isVisible)
    assert reshown.tool_calls.isVisible()
    assert reshown.tool_calls.text() == shown
    send(qtbot, window, "Thanks")  # the calls go back to the model with the turn
    wait_idle(qtbot, window)
    sent = fake.requests[-1]["messages"][1]
    assert [c["id"] for c in sent["tool_calls"]] == ["call_ab12", "call_cd34"]
    assert sent["content"] is None
