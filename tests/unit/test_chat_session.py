"""The chat session's rules without Qt (app.chat): the real Runtime, history.db and document
library in tmp_path, real MCP stdio servers (tests/support/mcp_server.py) and a scripted remote
model (tests/support/fake_openai.py: `agent` calls `get_weather` and answers from its result,
`tool` calls tools forever, `ok` says "Hello world", `stall` says "Hel" and hangs)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.chat.events import (
    AnswerDone,
    AnswerStarted,
    ChatError,
    ChatEvent,
    Notice,
    TextDelta,
    ToolCallAsked,
    ToolResult,
)
from app.chat.policy import DROP_OLD_TURNS, TRUNCATED_NOTE, ContextPolicy
from app.chat.request import TurnOptions, build_request, options_from
from app.chat.session import ChatSession
from app.chat.tools import STOPPED_RUNNING, ChatTools
from app.config import Paths
from app.documents.library import DocumentLibrary
from app.documents.reader import read_document
from app.history import History
from app.mcp.approvals import Approvals
from app.mcp.tool_loop import DEFAULT_SYSTEM, TOOLS_NOTE, denied_text, step_limit_note
from app.preferences import Settings
from app.presets import Preset
from app.runtime import Runtime, endpoints
from app.runtime.thinking import ThinkingSupport
from app.store import Store
from backends.base import SamplingParams, Thinking, Tool
from tests.support.fake_openai import AGENT_SAYS, fake_server
from tests.support.mcp_server import WEATHER, command

OSLO = WEATHER.format(city="Oslo")
OPTIONS = TurnOptions(SamplingParams(max_tokens=64), None)


@dataclass
class Front:
    """A front end: what it was shown, and how it answers tool calls."""
    decisions: list[str] = field(default_factory=list)  # one per call asked, in order
    events: list[ChatEvent] = field(default_factory=list)
    asked: list[ToolCallAsked] = field(default_factory=list)

    def show(self, event: ChatEvent) -> None:
        self.events.append(event)

    def approve(self, asked: ToolCallAsked) -> str:
        self.asked.append(asked)
        return self.decisions.pop(0)

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]


@dataclass
class Lab:
    home: Paths
    runtime: Runtime
    history: History
    tools: ChatTools
    library: DocumentLibrary
    requests: list[dict]

    def session(self, model: str, servers: tuple[str, ...] = (), system: str = "",
                step_limit: int = 8) -> ChatSession:
        conv = self.history.create(model=model, system_prompt=system)
        self.history.set_mcp_servers(conv.id, servers)
        return ChatSession(self.history, self.runtime, conv.id, f"lab/{model}", OPTIONS,
                           self.tools, self.library, self.home, step_limit=step_limit)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    home = Paths(tmp_path / "home")
    home.home.mkdir(parents=True)
    home.mcp_file.write_text(json.dumps({"mcpServers": {
        "weather": command(), "slow": command("--slow", "30")}}))
    requests: list[dict] = []
    with fake_server(slow_s=30, requests=requests) as url:
        endpoints.add("lab", url, paths=home)
        with Runtime(store=Store(home)) as rt:
            tools = ChatTools(home)
            history = History(tmp_path / "history.db")
            library = DocumentLibrary(tmp_path / "documents.db", read=read_document)
            try:
                yield Lab(home, rt, history, tools, library, requests)
            finally:
                tools.close()
                history.close()
                library.close()


def stored(lab: Lab, session: ChatSession) -> list[tuple[str, str, str]]:
    return [(m.role, m.status, m.content)
            for m in lab.history.messages(session.conversation_id)]


# request assembly


def test_the_request_has_the_system_prompt_the_preset_and_the_think_switch(tmp_path):
    history = History(tmp_path / "history.db")
    conv = history.create(system_prompt="Be brief.")
    history.add_message(conv.id, "user", "Hi")
    history.add_message(conv.id, "assistant", "Hello", status="error")  # a failed answer
    history.add_message(conv.id, "user", "Again")
    history.set_thinking(conv.id, "off")
    preset = Preset("terse", temperature=0.1, max_tokens=33)
    options = options_from(Settings(), preset, "lab/ok", remote=True, home=None)
    support = ThinkingSupport(thinks=True, can_switch_off=True)
    request = build_request(history.get(conv.id), history.messages(conv.id), options, support)
    assert [(m.role, m.content) for m in request.messages] == [
        ("system", "Be brief."), ("user", "Hi"), ("user", "Again")]
    assert request.sampling.temperature == 0.1 and request.sampling.max_tokens == 33
    assert request.thinking == Thinking(enabled=False)
    assert request.truncate is True and request.speculative is None  # remote: no lookup
    assert request.tool_choice.mode == "auto" and request.tools == ()
    # a model without the switch gets its default; a front end may set thinking outright
    assert build_request(history.get(conv.id), history.messages(conv.id), options,
                         ThinkingSupport()).thinking == Thinking()
    told = TurnOptions(options.sampling, thinking=Thinking(enabled=True, effort="high"))
    assert build_request(history.get(conv.id), history.messages(conv.id), told,
                         support).thinking == Thinking(enabled=True, effort="high")
    history.close()


def test_tools_add_their_note_and_documents_go_before_the_last_question(tmp_path):
    history = History(tmp_path / "history.db")
    conv = history.create()
    history.add_message(conv.id, "user", "What fruit?")
    tool = Tool("get_weather", "weather", {"type": "object", "properties": {}})
    request = build_request(history.get(conv.id), history.messages(conv.id), OPTIONS,
                            ThinkingSupport(), (tool,), "[notes.txt]\nMango.",
                            answer_only=True)
    assert request.messages[0].content == f"{DEFAULT_SYSTEM} {TOOLS_NOTE}"
    assert request.messages[1].content == "[notes.txt]\nMango.\n\nWhat fruit?"
    assert history.messages(conv.id)[0].content == "What fruit?"  # stored as typed
    assert request.tools == (tool,) and request.tool_choice.mode == "none"
    history.close()


def test_the_context_policy_drops_old_turns_and_says_so():
    assert DROP_OLD_TURNS.truncate
    assert DROP_OLD_TURNS.note(True) == TRUNCATED_NOTE and DROP_OLD_TURNS.note(False) == ""
    assert ContextPolicy(truncate=False).note(True) == ""


# turns


def test_an_answer_streams_and_is_stored_with_its_stats(lab: Lab):
    session, front = lab.session("ok", system="Be brief."), Front()
    session.send("Hi there", front.show)
    assert "".join(e.text for e in front.of(TextDelta)) == "Hello world"
    assert stored(lab, session) == [("user", "complete", "Hi there"),
                                    ("assistant", "complete", "Hello world")]
    done = front.of(AnswerDone)[0]
    assert done.stats["finish_reason"] == "stop"
    assert lab.history.get(session.conversation_id).title == "Hi there"
    assert lab.requests[-1]["messages"][0] == {"role": "system", "content": "Be brief."}


def test_an_approved_call_runs_on_the_mcp_server_and_the_model_answers_from_it(lab: Lab):
    session, front = lab.session("agent", ("weather",)), Front(["approve"])
    session.send("Weather in Oslo?", front.show, front.approve)
    assert [(a.tool, a.server) for a in front.asked] == [("get_weather", "weather")]
    assert json.loads(front.asked[0].arguments) == {"city": "Oslo"}
    assert stored(lab, session) == [
        ("user", "complete", "Weather in Oslo?"), ("assistant", "complete", ""),
        ("tool", "complete", OSLO), ("assistant", "complete", AGENT_SAYS + OSLO)]
    tool = lab.history.messages(session.conversation_id)[2]
    assert tool.stats["outcome"] == "ok" and tool.tool_name == "get_weather"
    first = lab.requests[0]
    assert [t["function"]["name"] for t in first["tools"]] == ["get_weather", "add"]
    assert first["messages"][0]["content"].endswith(TOOLS_NOTE)


def test_a_denied_call_is_not_run_and_the_model_is_told(lab: Lab):
    session, front = lab.session("agent", ("weather",)), Front(["deny"])
    session.send("Weather in Oslo?", front.show, front.approve)
    messages = lab.history.messages(session.conversation_id)
    assert messages[2].content == denied_text("get_weather")
    assert messages[2].stats["outcome"] == "denied"
    assert messages[3].content == AGENT_SAYS + denied_text("get_weather")
    assert [r.outcome for r in front.of(ToolResult)] == ["denied"]


def test_allow_always_is_remembered_and_not_asked_again(lab: Lab):
    session, front = lab.session("agent", ("weather",)), Front(["always"])
    session.send("Weather in Oslo?", front.show, front.approve)
    assert Approvals(lab.home.mcp_approvals).all() == ["weather/get_weather"]
    again = Front()  # no decisions: asking would fail the test
    session.send("And now?", again.show, again.approve)
    assert again.asked == []
    assert [r.outcome for r in again.of(ToolResult)] == ["running", "ok"]


def test_stop_while_a_call_runs_ends_the_turn_without_waiting_for_it(lab: Lab):
    """The slow server answers after 30 s; Stop while it runs ends the turn now, the call's
    message saying its result was not waited for, and the model is not asked again."""
    session, front = lab.session("agent", ("slow",)), Front(["approve"])

    def show(event: ChatEvent) -> None:
        front.show(event)
        if isinstance(event, ToolResult) and event.outcome == "running":
            session.stop()  # as a front end's Stop button would, from its own thread

    session.send("Weather in Oslo?", show, front.approve)
    assert stored(lab, session) == [
        ("user", "complete", "Weather in Oslo?"), ("assistant", "complete", ""),
        ("tool", "stopped", STOPPED_RUNNING)]
    assert [r.outcome for r in front.of(ToolResult)] == ["running", "stopped"]


def test_a_model_that_calls_tools_forever_stops_at_the_step_limit(lab: Lab):
    session = lab.session("tool", ("weather",), step_limit=2)
    front = Front(["approve"] * 20)
    session.send("Weather?", front.show, front.approve)
    done = front.of(AnswerDone)
    assert done[-1].note == step_limit_note(2)
    assert all(d.note == "" for d in done[:-1])
    # a round runs; the same calls again are asked once to be words instead (a version
    # beside them, tool_choice none); that answer still calls: a second round; the next
    # answer is at the limit (app.mcp.tool_loop.next_step)
    assert len(done) == 4
    roles = [m.role for m in lab.history.all_messages(session.conversation_id)]
    assert roles == ["user", "assistant", "tool", "tool", "assistant", "assistant", "tool",
                     "tool", "assistant"]
    assert lab.requests[2]["tool_choice"] == "none"
    # get_time is no tool of this chat: the model is told, not the user asked
    results = {r.tool: r for r in front.of(ToolResult) if r.outcome == "error"}
    assert "there is no tool 'get_time' in this chat" in results["get_time"].text


def test_a_server_that_is_not_in_mcp_json_leaves_the_answer_without_tools(lab: Lab):
    lab.home.mcp_file.write_text("{not json")
    session, front = lab.session("ok", ("weather",)), Front()
    session.send("Hi", front.show, front.approve)
    assert front.of(Notice)[0].text.startswith("MCP tools are off for this answer:")
    assert stored(lab, session)[-1] == ("assistant", "complete", "Hello world")


def test_retry_keeps_both_answers_and_edit_makes_a_sibling_question(lab: Lab):
    session, front = lab.session("ok"), Front()
    session.send("Hi", front.show)
    first = lab.history.messages(session.conversation_id)[-1]
    session.retry(front.show)
    second = lab.history.messages(session.conversation_id)[-1]
    assert second.id != first.id and second.parent_id == first.parent_id
    place = lab.history.versions(session.conversation_id)
    assert place[second.id].siblings == (first.id, second.id)
    session.edit_last("Hello?", front.show)
    path = lab.history.messages(session.conversation_id)
    assert [(m.role, m.content) for m in path] == [("user", "Hello?"),
                                                  ("assistant", "Hello world")]
    assert lab.history.versions(session.conversation_id)[path[0].id].count == 2
    # the model is given the shown path only
    assert [m["content"] for m in lab.requests[-1]["messages"]] == ["Hello?"]
    assert len(lab.history.all_messages(session.conversation_id)) == 5


def test_documents_go_with_the_question_and_the_answer_keeps_its_sources(lab: Lab,
                                                                          tmp_path: Path):
    notes = tmp_path / "notes.txt"
    notes.write_text("The secret fruit is mango.\n")
    session, front = lab.session("ok"), Front()
    lab.library.attach(session.conversation_id, notes)
    session.send("Which fruit?", front.show)
    started = front.of(AnswerStarted)[0]
    assert started.sources == ("notes.txt, line 1",)
    question = lab.requests[-1]["messages"][-1]["content"]
    assert "[notes.txt, line 1]\nThe secret fruit is mango." in question
    assert question.endswith("Which fruit?")
    answer = lab.history.messages(session.conversation_id)[-1]
    assert answer.stats["sources"] == ["notes.txt, line 1"]
    # a retried answer is given the same pieces
    session.retry(front.show)
    assert lab.requests[-1]["messages"][-1]["content"] == question


def test_a_failed_answer_is_stored_as_an_error_and_said(lab: Lab):
    session, front = lab.session("fail"), Front()
    session.send("Hi", front.show)
    assert front.of(ChatError)[0].kind in ("backend", "invalid")
    assert stored(lab, session)[-1][:2] == ("assistant", "error")


KILLED_TURN = """
import sys
from pathlib import Path
from app.chat.request import TurnOptions
from app.chat.session import ChatSession
from app.config import Paths
from app.history import History
from app.runtime import Runtime
from app.store import Store
from backends.base import SamplingParams

home, db, conversation = Paths(Path(sys.argv[1])), Path(sys.argv[2]), int(sys.argv[3])
with Runtime(store=Store(home)) as rt:
    session = ChatSession(History(db), rt, conversation, "lab/stall",
                          TurnOptions(SamplingParams(max_tokens=64), None))
    session.send("Tell me a story", lambda event: None)
"""


def test_a_kill_mid_answer_leaves_the_question_and_the_partial_answer(lab: Lab,
                                                                     tmp_path: Path):
    """A real kill (SIGKILL) of the process making the answer, while the model stalls after
    its first piece: the next open marks the answer "interrupted", with what had streamed."""
    import subprocess
    import sys
    import time

    from tests.support.mcp_server import REPO

    session = lab.session("stall")
    db = lab.history.path
    child = subprocess.Popen([sys.executable, "-c", KILLED_TURN, str(lab.home.home), str(db),
                              str(session.conversation_id)], cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and child.poll() is None:
            if stored(lab, session)[-1:] == [("assistant", "streaming", "Hel")]:
                break
            time.sleep(0.1)
        assert stored(lab, session)[-1:] == [("assistant", "streaming", "Hel")], child.poll()
    finally:
        child.kill()
        child.wait()
    reopened = History(db)
    assert reopened.interrupted_on_open == 1
    assert [(m.role, m.status, m.content) for m in reopened.messages(session.conversation_id)
            ] == [("user", "complete", "Tell me a story"), ("assistant", "interrupted", "Hel")]
    reopened.close()
