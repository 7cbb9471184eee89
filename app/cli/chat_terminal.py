"""`ember chat` on the chat session (app.chat.session.ChatSession), as the window uses it: the
conversation is kept in history.db, `/tools` switches the MCP servers of mcp.json on for it
(each call asks on the terminal), `/attach FILE` adds a document (answers show their
Sources), `/image FILE` an image to the next message, `/retry` and `/edit` add versions
beside the old ones, thinking is printed apart.

The turn runs on a worker thread; the main thread waits for it, asks the terminal what a tool
call's approval is (the worker waits on a queue), and turns Ctrl+C into session.stop().
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from app.chat.attachments import Attachment
from app.chat.events import (
    AnswerDone,
    AnswerStarted,
    ChatError,
    ChatEvent,
    Decision,
    MediaRefused,
    Notice,
    TextDelta,
    ThinkingDelta,
    ToolCallAsked,
    ToolResult,
)
from app.chat.request import TurnOptions
from app.chat.session import ChatSession
from app.chat.tools import ChatTools
from app.cli.answer_output import AnswerPrinter
from app.cli.generate import EFFORTS
from app.config import Paths, paths
from app.history import History
from backends.base import Stats, Thinking
from backends.errors import EmberError

if TYPE_CHECKING:
    from app.documents.library import DocumentLibrary
    from app.runtime import Runtime

CHAT_HELP = ("/reset starts a new conversation, /system TEXT sets the system prompt, "
             "/think on|off|low|medium|high|default sets thinking, /tools [SERVER] lists or "
             "switches MCP servers, /attach FILE adds a document, /image FILE adds an image to "
             "the next message, /retry answers again, "
             "/edit [TEXT] changes the last message, /bye leaves")
THINK_WORDS = {"on": Thinking(enabled=True), "off": Thinking(enabled=False),
               "default": Thinking(), **{e: Thinking(enabled=True, effort=e)  # type: ignore
                                         for e in EFFORTS}}
DECISIONS: dict[str, Decision] = {"y": "approve", "yes": "approve", "n": "deny", "no": "deny",
                                  "a": "always", "always": "always"}


def stats_of(data: dict) -> Stats:
    names = {f.name for f in fields(Stats)}
    return Stats(**{k: v for k, v in data.items() if k in names})


@dataclass
class Terminal:
    """What an answer looks like on the terminal."""
    stats_line: Callable[[Stats], str]
    hide_thinking: bool = False
    printer: AnswerPrinter = field(default_factory=AnswerPrinter)
    sources: tuple[str, ...] = ()

    def show(self, event: ChatEvent) -> None:
        if isinstance(event, AnswerStarted):
            self.printer = AnswerPrinter(hide=self.hide_thinking)
            self.sources = event.sources
        elif isinstance(event, TextDelta):
            self.printer.token(event.text)
        elif isinstance(event, ThinkingDelta):
            self.printer.reasoning(event.text)
        elif isinstance(event, AnswerDone):
            self.printer.end(event.tool_calls)
            if self.printer.answered:
                click.echo()
            if self.sources and not event.tool_calls:
                click.echo(f"Sources: {'; '.join(self.sources)}")
            if event.status == "stopped":
                click.echo("[stopped]", err=True)
            else:
                click.echo(f"[{self.stats_line(stats_of(event.stats))}]", err=True)
            if event.note:
                click.echo(f"({event.note})", err=True)
        elif isinstance(event, ToolResult) and event.outcome != "running":
            text = " ".join(event.text.split())
            click.echo(f"[{event.tool}: {event.outcome}] {text[:200]}", err=True)
        elif isinstance(event, ToolResult) and event.note:
            click.echo(f"({event.note})", err=True)
        elif isinstance(event, Notice | MediaRefused):
            click.echo(f"({event.text})", err=True)
        elif isinstance(event, ChatError):
            self.printer.end()
            click.echo(f"\nerror: {event.message}", err=True)


def ask_approval(asked: ToolCallAsked) -> Decision:
    """The terminal's answer to a tool call; end of input denies."""
    while True:
        try:
            word = input(f"Allow {asked.tool}({asked.arguments})? [y]es/[n]o/[a]lways ")
        except EOFError:
            return "deny"
        decision = DECISIONS.get(word.strip().lower())
        if decision is not None:
            return decision
        click.echo("answer y, n or a")


def run_turn(session: ChatSession, work: Callable[..., None], terminal: Terminal) -> None:
    """Run `work(on_event, approve)` on a worker thread; approvals are asked here, and
    Ctrl+C stops the turn (the answer is saved as stopped)."""
    asks: queue.Queue[ToolCallAsked] = queue.Queue()
    replies: queue.Queue[Decision] = queue.Queue()
    failure: list[BaseException] = []

    def approve(asked: ToolCallAsked) -> Decision:
        asks.put(asked)
        return replies.get()

    def body() -> None:
        try:
            work(terminal.show, approve)
        except EmberError as e:
            failure.append(e)

    worker = threading.Thread(target=body, name="ember-chat-turn", daemon=True)
    worker.start()
    while worker.is_alive():
        try:
            try:
                asked = asks.get(timeout=0.1)
            except queue.Empty:
                continue
            terminal.printer.end()
            replies.put(ask_approval(asked))
        except KeyboardInterrupt:
            session.stop()
            if not asks.empty() or worker.is_alive():
                replies.put("deny")  # a call waiting for its answer is not run
    worker.join()
    if failure:
        click.echo(f"error: {failure[0]}", err=True)


def chat_loop(rt: Runtime, ref: str, options: TurnOptions, system: str | None, hide_thinking: bool,
              stats_line: Callable[[Stats], str], home: Paths | None = None) -> None:
    from app.documents.library import DocumentLibrary

    home = home or paths()
    history = History(home.history_db)
    tools = ChatTools(home)
    library = DocumentLibrary(home.documents_db)
    terminal = Terminal(stats_line, hide_thinking)

    def new_session() -> ChatSession:
        conv = history.create(model=ref, system_prompt=system or "")
        return ChatSession(history, rt, conv.id, ref, options, tools, library, home)

    session = new_session()
    images: list[Attachment] = []  # for the next message (/image)
    try:
        while True:
            try:
                line = input(">>> ")
            except EOFError:
                click.echo()
                return
            except KeyboardInterrupt:
                click.echo("\n(Ctrl+D or /bye to leave)")
                continue
            text = line.strip()
            if not text:
                continue
            word, _, rest = text.partition(" ")
            rest = rest.strip()
            if word in ("/bye", "/exit", "/quit"):
                return
            if word == "/reset":
                session = new_session()
                images.clear()
                click.echo("(conversation cleared)")
            elif word == "/think":
                choice = rest or "on"
                if choice not in THINK_WORDS:
                    click.echo(f"/think takes one of {', '.join(THINK_WORDS)}")
                    continue
                options = replace(options, thinking=THINK_WORDS[choice])
                session.options = options
                click.echo(f"(thinking: {choice})")
            elif word == "/system":
                system = rest or None
                history.set_system_prompt(session.conversation_id, rest)
                click.echo(f"(system prompt {'set' if system else 'cleared'})")
            elif word == "/tools":
                switch_tools(history, tools, session.conversation_id, rest)
            elif word == "/attach":
                attach(library, session.conversation_id, rest)
            elif word == "/image":
                add_image(session, images, rest)
            elif word == "/retry":
                run_turn(session, session.retry, terminal)
            elif word == "/edit":
                edit(session, terminal, rest)
            elif word.startswith("/"):
                click.echo(f"unknown command {word!r}; {CHAT_HELP}")
            else:
                send(session, terminal, line, tuple(images))
                images.clear()
    finally:
        tools.close()
        history.close()
        library.close()


def send(session: ChatSession, terminal: Terminal, text: str,
         images: tuple[Attachment, ...] = ()) -> None:
    run_turn(session, lambda show, approve: session.send(text, show, approve,
                                                         attachments=images), terminal)


def add_image(session: ChatSession, images: list[Attachment], file: str) -> None:
    """/image FILE: checked and decoded now (a broken file, or a model that cannot see, is
    said at once), sent with the next message."""
    if not file:
        click.echo("/image takes a file: /image screenshot.png")
        return
    attachment = session.attach(Path(file).expanduser(),
                                lambda e: click.echo(f"({getattr(e, 'text', e)})"))
    if attachment is not None:
        images.append(attachment)
        click.echo(f"(image {attachment.name}, {attachment.media.describe()}: sent with your "
                   f"next message)")


def switch_tools(history: History, tools: ChatTools, conversation_id: int, name: str) -> None:
    """/tools: the servers of mcp.json, on or off for this chat; /tools NAME switches one."""
    servers, error = tools.servers_or_error()
    if error:
        click.echo(f"MCP tools cannot be used: {error}")
        return
    on = set(history.mcp_servers(conversation_id))
    if name:
        if name not in servers:
            known = ", ".join(sorted(servers)) or f"none (add servers to {tools.home.mcp_file})"
            click.echo(f"no MCP server {name!r}; the servers are: {known}")
            return
        on ^= {name}
        history.set_mcp_servers(conversation_id, tuple(sorted(on)))
        click.echo(f"(tools of {name} {'on' if name in on else 'off'})")
        return
    if not servers:
        click.echo(f"no MCP servers: add them to {tools.home.mcp_file}")
    for server in sorted(servers):
        click.echo(f"  {server} ({'on' if server in on else 'off'}): "
                   f"{servers[server].where}")


def attach(library: DocumentLibrary, conversation_id: int, file: str) -> None:
    if not file:
        click.echo("/attach takes a file: /attach notes.pdf")
        return
    try:
        doc = library.attach(conversation_id, Path(file).expanduser())
    except EmberError as e:
        click.echo(f"not attached: {e}")
        return
    click.echo(f"(attached {doc.name}: {doc.characters:,} characters)")


def edit(session: ChatSession, terminal: Terminal, text: str) -> None:
    """/edit TEXT, or /edit alone: the last message is shown and its new text read."""
    last = session.last_question()
    if last is None:
        click.echo("there is no message to edit yet")
        return
    if not text:
        click.echo(f"(editing: {last.content})")
        try:
            text = input("edit> ").strip()
        except EOFError:
            return
        if not text:
            click.echo("(not edited)")
            return
    run_turn(session, lambda show, approve: session.edit_last(text, show, approve), terminal)
