"""The requests of a scripted coding-agent session, in the shape Claude Code sends: a long
system prompt and a dozen tool schemas (the shared prefix, about 12k tokens), then the user's
turn, the assistant's tool calls and the tools' results. The assistant turns are scripted, not
the model's answers, so every server gets the very same requests.

The text is synthetic (made-up rules and tools in an agent's style, not any product's prompt),
sized to a token count with the model's own vocabulary (`agent_prefix`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

INTRO = ("You are a coding agent that works in the user's repository from a terminal. You read "
         "files, run commands and edit code with the tools below, and you answer briefly: the "
         "user reads your answers in a terminal, so one or two sentences are better than a page. "
         "Never guess the contents of a file: read it. Never claim a test passed without "
         "running it.\n\n# Rules\n")
TOPICS = ("tests", "commits", "dependencies", "file edits", "shell commands", "code style",
          "documentation", "error handling", "secrets", "performance", "refactoring", "logging",
          "configuration", "type hints", "database migrations", "code review")
RULES = (
    "When the task touches {t}, read the surrounding code first and follow the conventions "
    "you find there; do not introduce a new pattern for {t} unless the user asks for one.",
    "Before you change anything about {t}, say in one sentence what you are about to do and "
    "why, then make the smallest change that works and show the user what changed.",
    "If a request about {t} is ambiguous, ask one short question instead of guessing; if it "
    "is clear, do not ask for confirmation, just do it and report the result.",
    "Keep changes to {t} inside the files the task needs. Do not reformat unrelated code, do "
    "not rename things in passing, and do not add comments that restate the code.",
    "After a change to {t}, run the narrowest check that proves it works (a single test file, "
    "a type check of one module, a dry run) and quote its last lines in your answer.",
    "Prefer the project's own tools for {t}: its scripts, its Makefile targets, its configured "
    "linters. Look for them before you reach for a global command.",
    "Never delete or overwrite the user's work while handling {t}: no force pushes, no "
    "`rm -rf`, no resets of uncommitted changes, unless the user asked for exactly that.",
    "When {t} fail or behave unexpectedly, read the whole error, find its cause in the code and "
    "fix the cause; do not silence the error or retry blindly.",
)
TOOLS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("Bash", "Runs a shell command in the repository and returns its output. Commands time out "
     "after two minutes. Quote paths with spaces. Do not use it to read or edit files: the Read "
     "and Edit tools do that better.", {"command": "the command line", "timeout": "seconds"}),
    ("Read", "Reads a file from the local filesystem. Returns numbered lines; long files are "
     "cut at 2000 lines, pass offset and limit to read further.",
     {"file_path": "absolute path", "offset": "first line", "limit": "number of lines"}),
    ("Edit", "Replaces an exact string in a file. The old string must occur exactly once; give "
     "more surrounding lines to make it unique. Read the file before editing it.",
     {"file_path": "absolute path", "old_string": "text to replace",
      "new_string": "replacement"}),
    ("Write", "Writes a whole file, replacing what was there. Prefer Edit for existing files.",
     {"file_path": "absolute path", "content": "the file's new text"}),
    ("Glob", "Lists the files whose paths match a glob pattern such as **/*.py, newest first.",
     {"pattern": "glob pattern", "path": "folder to search"}),
    ("Grep", "Searches file contents with a regular expression and returns the matching lines "
     "with their file names and line numbers.",
     {"pattern": "regular expression", "path": "folder or file", "glob": "file filter"}),
    ("TodoWrite", "Keeps the task list of this session: items with a status of pending, "
     "in_progress or completed. Use it for tasks of three steps or more.",
     {"todos": "the whole list, as JSON"}),
    ("WebFetch", "Fetches a web page and returns its text as markdown.",
     {"url": "the page's address", "prompt": "what to look for in it"}),
    ("Task", "Starts a sub-agent with its own context for a search or a self-contained job, "
     "and returns its final report.", {"description": "short title", "prompt": "the job"}),
    ("NotebookEdit", "Replaces, inserts or deletes one cell of a Jupyter notebook.",
     {"notebook_path": "absolute path", "cell_id": "the cell", "new_source": "its text"}),
    ("BashOutput", "Returns the new output of a background shell started by Bash.",
     {"shell_id": "the shell", "filter": "regular expression for lines to keep"}),
    ("ExitPlanMode", "Ends planning and shows the plan to the user for approval.",
     {"plan": "the plan, as markdown"}),
)


def tool_schemas() -> list[dict]:
    """TOOLS as OpenAI function tools, each description followed by usage notes (a real
    agent's tool descriptions run to paragraphs)."""
    out = []
    for i, (name, description, params) in enumerate(TOOLS):
        notes = " ".join(RULES[(i + k) % len(RULES)].format(t=TOPICS[(i + k) % len(TOPICS)])
                         for k in range(3))
        out.append({"type": "function", "function": {
            "name": name, "description": f"{description}\n\nUsage notes: {notes}",
            "parameters": {"type": "object", "required": [next(iter(params))], "properties": {
                key: {"type": "string", "description": text} for key, text in params.items()}}}})
    return out


def system_prompt(rules: int, session: str = "") -> str:
    """INTRO and `rules` numbered rules (every RULES x TOPICS pair, then again); `session`
    goes first, so a different one shares nothing with the others."""
    lines = [f"{n + 1}. " + RULES[n % len(RULES)].format(t=TOPICS[(n // len(RULES)) % len(TOPICS)])
             for n in range(rules)]
    return session + INTRO + "\n".join(lines)


@dataclass(frozen=True)
class AgentPrefix:
    system: str
    tools: list[dict]
    tokens: int  # system prompt and tool schemas, counted as plain text (no chat template)


def agent_prefix(tokens: int, count: Callable[[str], int], session: str = "") -> AgentPrefix:
    """The system prompt and tools, with as many rules as bring them to about `tokens`."""
    tools = tool_schemas()

    def size(rules: int) -> int:
        return count(system_prompt(rules, session)) + count(json.dumps(tools))

    base, per_rule = size(0), (size(100) - size(0)) / 100
    rules = max(0, round((tokens - base) / per_rule))
    rules = max(0, rules + round((tokens - size(rules)) / per_rule))  # rules vary in length
    return AgentPrefix(system_prompt(rules, session), tools, size(rules))


SETTINGS_PY = "\n".join(
    ['"""Settings of the web service, read once at start-up."""', "", "import os", ""]
    + [f'{key} = os.environ.get("APP_{key}", {value!r})' for key, value in (
        ("HOST", "127.0.0.1"), ("PORT", "8080"), ("WORKERS", "4"), ("LOG_LEVEL", "info"),
        ("DATABASE_URL", "sqlite:///app.db"), ("CACHE_TTL", "300"), ("MAX_UPLOAD_MB", "25"),
        ("SESSION_COOKIE", "app_session"), ("CORS_ORIGINS", "http://localhost:3000"))]
    + ["", "", "def bind_address() -> str:", '    return f"{HOST}:{PORT}"', ""])


def call(call_id: str, name: str, arguments: dict) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": call_id, "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def result(call_id: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def session_requests(prefix: AgentPrefix) -> list[list[dict]]:
    """The messages of the session's 5 requests, each the one before it plus the turns since:
    a question, a Read call and its result, an answer and a request for a change, an Edit call
    and its result, a Bash call running the tests and its output."""
    path = "/home/user/app/config/settings.py"
    turns = [
        [{"role": "system", "content": prefix.system},
         {"role": "user", "content": "Which port does the service listen on? The settings are "
                                     "in config/settings.py."}],
        [call("call_1", "Read", {"file_path": path}),
         result("call_1", "\n".join(f"{n:>6}\t{line}" for n, line in
                                    enumerate(SETTINGS_PY.splitlines(), 1)))],
        [{"role": "assistant", "content": "It listens on port 8080 (`PORT` in "
                                          "config/settings.py, overridable with APP_PORT)."},
         {"role": "user", "content": "Change the default to 9000 and run the settings tests."}],
        [call("call_2", "Edit", {"file_path": path,
                                 "old_string": 'PORT = os.environ.get("APP_PORT", \'8080\')',
                                 "new_string": 'PORT = os.environ.get("APP_PORT", \'9000\')'}),
         result("call_2", f"The file {path} has been updated.")],
        [call("call_3", "Bash", {"command": "python -m pytest tests/test_settings.py -q"}),
         result("call_3", "...F\n=================================== FAILURES ===========\n"
                          "___ test_bind_address ___\n    assert bind_address() == "
                          "'127.0.0.1:8080'\nE   AssertionError: assert '127.0.0.1:9000' == "
                          "'127.0.0.1:8080'\n1 failed, 3 passed in 0.41s")],
    ]
    requests, messages = [], []
    for turn in turns:
        messages = [*messages, *turn]
        requests.append(messages)
    return requests


def other_conversation(prefix: AgentPrefix, question: str) -> list[dict]:
    """A new conversation on the same system prompt (the same tools go with it)."""
    return [{"role": "system", "content": prefix.system}, {"role": "user", "content": question}]
