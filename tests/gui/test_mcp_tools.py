"""MCP tools in the window, driven like a user would: the real window, Runtime and MCP servers
(tests/support/mcp_server.py, stdio), with a scripted remote model (tests/support/fake_openai.py:
`agent` calls the server's `get_weather` tool and answers from its result; `tool` calls tools
forever) so every path is exact: approvals, Allow always, a crash, a server that cannot start,
the step limit, reopening a conversation, and mcp.json in Settings. The real model's turn is in
test_mcp_qwen.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.config import Paths
from app.gui import build_window
from app.gui.chat_view import MessageWidget
from app.gui.main_window import MainWindow
from app.gui.settings_dialog import SettingsDialog
from app.gui.tool_card import ToolCard
from app.mcp.approvals import Approvals, definition
from app.mcp.config import load_mcp_config
from app.mcp.tool_loop import STEP_LIMIT
from app.runtime import Runtime, endpoints
from app.store import Store
from tests.support.fake_openai import AGENT_SAYS, fake_server
from tests.support.mcp_server import FAILED_START, WEATHER, command

WAIT_MS = 60_000
OSLO = WEATHER.format(city="Oslo")
SERVERS = {"weather": command(), "dying": command("--die-on-call"),
           "broken": command("--fail-at-start"), "slow": command("--slow", "30")}


@pytest.fixture
def requests() -> list[dict]:
    return []


@pytest.fixture
def window(qtbot, tmp_path: Path, requests: list[dict]) -> Iterator[MainWindow]:
    home = Paths(tmp_path / "home")
    home.home.mkdir(parents=True)
    home.mcp_file.write_text(json.dumps({"mcpServers": SERVERS}))
    with fake_server(requests=requests) as url:
        endpoints.add("lab", url, paths=home)
        with Runtime(store=Store(home)) as rt:
            w = build_window(home=home, runtime=rt)
            qtbot.addWidget(w)
            w.show()
            qtbot.waitUntil(lambda: w.model_picker.findData("lab/agent") >= 0, timeout=WAIT_MS)
            w.show_chat()
            yield w
            w.close()  # stops the answer and the MCP servers


def pick(w: MainWindow, ref: str) -> None:
    w.model_picker.setCurrentIndex(w.model_picker.findData(ref))


def switch_on(w: MainWindow, server: str) -> None:
    """As a click on the server in the Tools menu."""
    w.chat.tools.opening.emit()  # the menu reads mcp.json as it opens
    w.chat.tools.actions_by_server[server].trigger()


def send(qtbot, w: MainWindow, text: str) -> None:
    w.chat.composer.setPlainText(text)
    qtbot.keyClick(w.chat.composer, Qt.Key.Key_Return)


def cards(w: MainWindow) -> list[ToolCard]:
    return [m for m in w.chat.messages if isinstance(m, ToolCard)]


def waiting_card(qtbot, w: MainWindow) -> ToolCard:
    """The card that waits for a decision, once its buttons are on screen: a card added to
    the chat is shown by a queued event, so it can wait a moment before it is visible."""
    def shown() -> bool:
        return any(c.waiting and c.buttons["Allow"].isVisible() for c in cards(w))
    qtbot.waitUntil(shown, timeout=WAIT_MS)
    return next(c for c in cards(w) if c.waiting)


def wait_idle(qtbot, w: MainWindow) -> None:
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=WAIT_MS)


def stored(w: MainWindow) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in w.history.messages(w.controller.conversation_id)]


def test_a_call_waits_for_allow_and_its_result_goes_back_to_the_model(
        qtbot, window: MainWindow, requests: list[dict]):
    pick(window, "lab/agent")
    window.new_chat()
    switch_on(window, "weather")
    assert window.chat.tools.text() == "Tools: 1 on"
    send(qtbot, window, "What is the weather in Oslo?")
    card = waiting_card(qtbot, window)
    assert card.header.text() == "Tool call: get_weather  ·  MCP server weather"
    assert json.loads(card.arguments.text()) == {"city": "Oslo"}
    assert card.buttons["Allow"].isVisible() and window.controller.busy
    assert "can act on your machine" in card.note.text()
    offered = [t["function"]["name"] for t in requests[-1]["tools"]]
    assert offered == ["get_weather", "add"]  # the server's two tools, as the model sees them
    qtbot.mouseClick(card.buttons["Allow"], Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    assert card.outcome == "ok" and card.result.text() == OSLO
    assert card.note.text().startswith("Done in ") and not card.buttons["Allow"].isVisible()
    answer = window.chat.messages[-1]
    assert isinstance(answer, MessageWidget) and answer.text == AGENT_SAYS + OSLO
    sent = requests[-1]["messages"]
    assert sent[-1] == {"role": "tool", "content": OSLO, "tool_call_id": sent[-2][
        "tool_calls"][0]["id"]}
    assert [r for r, _ in stored(window)] == ["user", "assistant", "tool", "assistant"]
    tool = window.history.messages(window.controller.conversation_id)[2]
    assert (tool.content, tool.tool_name, tool.status) == (OSLO, "get_weather", "complete")
    assert tool.stats["outcome"] == "ok" and tool.stats["server"] == "weather"


def test_allow_always_runs_the_next_call_without_asking_and_a_reopened_chat_shows_cards(
        qtbot, window: MainWindow, requests: list[dict]):
    pick(window, "lab/agent")
    window.new_chat()
    switch_on(window, "weather")
    send(qtbot, window, "Weather in Oslo?")
    qtbot.mouseClick(waiting_card(qtbot, window).buttons["Allow always"],
                     Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    allowed = json.loads(window.home.mcp_approvals.read_text())["allowed"]
    weather = load_mcp_config(window.home.mcp_file)["weather"]
    assert allowed == [f"weather/get_weather#{definition(weather)}"]
    send(qtbot, window, "And again?")
    wait_idle(qtbot, window)
    assert [c.outcome for c in cards(window)] == ["ok", "ok"]  # the second never waited
    conv = window.controller.conversation_id
    window.new_chat()
    assert cards(window) == [] and window.chat.tools.text() == "Tools: off"
    window.controller.open(conv)
    reopened = cards(window)
    assert [(c.outcome, c.result.text()) for c in reopened] == [("ok", OSLO)] * 2
    assert window.chat.tools.text() == "Tools: 1 on"  # the servers are the chat's
    send(qtbot, window, "Thanks")
    wait_idle(qtbot, window)
    roles = [m["role"] for m in requests[-1]["messages"]]
    assert roles.count("tool") == 3  # the stored results went back to the model


def test_deny_tells_the_model_the_call_was_not_run(qtbot, window: MainWindow,
                                                   requests: list[dict]):
    pick(window, "lab/agent")
    window.new_chat()
    switch_on(window, "weather")
    send(qtbot, window, "Weather in Oslo?")
    qtbot.mouseClick(waiting_card(qtbot, window).buttons["Deny"], Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    (card,) = cards(window)
    assert card.outcome == "denied" and card.note.text().startswith("Denied")
    told = requests[-1]["messages"][-1]
    assert told["role"] == "tool" and "The user denied this call of get_weather" in told["content"]
    assert window.chat.messages[-1].text.startswith(AGENT_SAYS + "The user denied")


def test_a_server_that_crashes_gives_one_line_in_its_card_and_the_chat_goes_on(
        qtbot, window: MainWindow):
    pick(window, "lab/agent")
    window.new_chat()
    switch_on(window, "dying")
    send(qtbot, window, "Weather in Oslo?")
    qtbot.mouseClick(waiting_card(qtbot, window).buttons["Allow"], Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    (card,) = cards(window)
    line = ("The tool could not be run: MCP server dying stopped during the call: the "
            "weather station crashed")
    assert card.outcome == "error" and card.result.text() == line
    assert window.chat.messages[-1].text == AGENT_SAYS + line
    assert not window.controller.busy and window.chat.send.text() == "Send"


def test_a_server_that_cannot_start_is_one_line_and_the_answer_comes_anyway(
        qtbot, window: MainWindow):
    pick(window, "lab/ok")
    window.new_chat()
    switch_on(window, "broken")
    send(qtbot, window, "Hi")
    wait_idle(qtbot, window)
    assert window.chat.messages[-1].text == "Hello world"
    banner = window.chat.banner_message()
    assert banner.startswith("MCP server broken stopped before it was ready")
    assert banner.endswith(FAILED_START)


def test_a_model_that_keeps_calling_tools_is_stopped_at_the_step_limit(
        qtbot, window: MainWindow, requests: list[dict]):
    pick(window, "lab/tool")  # calls get_weather and get_time, whatever it is told
    Approvals(window.home.mcp_approvals).allow_always(
        load_mcp_config(window.home.mcp_file)["weather"], "get_weather")
    window.new_chat()
    switch_on(window, "weather")
    send(qtbot, window, "Weather and time in Paris?")
    wait_idle(qtbot, window)
    assert len(cards(window)) == 2 * STEP_LIMIT
    assert [c.outcome for c in cards(window)] == ["ok", "error"] * STEP_LIMIT
    # a tool the chat does not have is answered at once, with the tools it has
    assert cards(window)[1].result.text() == ("The tool could not be run: there is no tool "
                                              "'get_time' in this chat (the tools are: "
                                              "get_weather, add)")
    # one more: its first repeat was dropped and it was asked without tools (it called anyway)
    assert len(requests) == STEP_LIMIT + 2
    assert [r.get("tool_choice") for r in requests[1:4]] == ["auto", "none", "auto"]
    last = window.chat.messages[-1]
    assert isinstance(last, MessageWidget)
    assert last.note.text().startswith(f"Stopped after {STEP_LIMIT} rounds of tool calls")


def test_stop_while_a_call_waits_ends_the_answer_and_the_call_is_not_run(
        qtbot, window: MainWindow):
    pick(window, "lab/agent")
    window.new_chat()
    switch_on(window, "weather")
    send(qtbot, window, "Weather in Oslo?")
    card = waiting_card(qtbot, window)
    qtbot.keyClick(window, Qt.Key.Key_Escape)
    assert not window.controller.busy
    assert card.outcome == "stopped" and not card.buttons["Allow"].isVisible()
    tool = window.history.messages(window.controller.conversation_id)[-1]
    assert (tool.role, tool.status) == ("tool", "stopped")


def test_stop_while_a_call_runs_ends_the_answer_at_once(qtbot, window: MainWindow):
    pick(window, "lab/agent")
    window.new_chat()
    switch_on(window, "slow")  # each call takes 30 s
    send(qtbot, window, "Weather in Oslo?")
    card = waiting_card(qtbot, window)
    qtbot.mouseClick(card.buttons["Allow"], Qt.MouseButton.LeftButton)
    # the call is sent on the turn's thread: the card says so once it is
    qtbot.waitUntil(lambda: card.outcome == "running", timeout=WAIT_MS)
    assert card.note.text() == "Running…" and not card.buttons["Allow"].isVisible()
    qtbot.keyClick(window, Qt.Key.Key_Escape)
    assert not window.controller.busy and card.outcome == "stopped"
    assert "its result was not waited for" in card.note.text()
    tool = window.history.messages(window.controller.conversation_id)[-1]
    assert (tool.role, tool.status) == ("tool", "stopped")
    assert tool.content.startswith("The user stopped the answer while this call ran")


def test_mcp_json_is_edited_in_settings_and_a_mistake_is_never_saved(qtbot, window: MainWindow):
    dialog = SettingsDialog(window.settings, window.runtime.hardware, "", [],
                            home=window.home)
    qtbot.addWidget(dialog)
    box = dialog.mcp
    assert json.loads(box.editor.toPlainText()) == {"mcpServers": SERVERS}
    before = window.home.mcp_file.read_text()
    box.editor.setPlainText('{"mcpServers": {"new": {"comand": "x"}}}')
    dialog._save()  # the dialog's Save button
    assert not dialog.result()  # still open
    assert box.error.text().startswith("Not saved: mcp.json: mcpServers[\"new\"]: unknown key "
                                       "'comand'")
    assert window.home.mcp_file.read_text() == before
    box.editor.setPlainText(json.dumps({"mcpServers": {"files": command()}}))
    qtbot.mouseClick(box.save_button, Qt.MouseButton.LeftButton)
    assert box.error.text() == "Saved: 1 server (files)"
    window.chat.tools.opening.emit()
    assert list(window.chat.tools.actions_by_server) == ["files"]
