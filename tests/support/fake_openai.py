"""A small OpenAI-compatible server that misbehaves on purpose, for the remote backend's tests.

The model a request names picks the misbehaviour:
  ok       streams "Hello world" properly (without usage: the client counts chunks)
  sees     answers as ok does, and /api/show lists vision for it
  slow     waits `slow_s` before answering at all
  stall    sends one chunk, then nothing for `slow_s`
  drop     sends three chunks, then closes the connection in the middle of the chunked body
  garbage  sends an SSE line that is not JSON
  html     answers 200 with an HTML page (a captive portal, a wrong URL)
  fail     answers 500 with an OpenAI error body
  think    a reasoning model as vLLM and llama-server stream it: `reasoning_content` deltas,
           then the answer's `content` (no thinking when the request's
           chat_template_kwargs.enable_thinking is false, as Qwen3's template does)
  reason   the same, with the thinking under `reasoning` (vLLM since PR #27752, Ollama /v1)
  tool     thinks, then calls two tools in parallel: `delta.tool_calls` fragments by index,
           id and name on each call's first fragment, finish_reason "tool_calls"
  agent    an agent over the test MCP server (tests/support/mcp_server.py): calls its tool
           `get_weather` for Oslo, and once the last message is a tool result, answers
           "The tool said: " and that result

The well-behaved models answer `"stream": false` with the whole message their stream adds up
to, and report usage (with reasoning_tokens) when asked. `requests` records every request
body; with a `gate`, the thinking models wait for it between their thinking and their answer
(a test looks at the window while the model is still thinking), and with an `answer_gate`
after the first piece of their answer (while it is answering). `POST /api/show` answers
Ollama's (and Ember's) model capabilities, which is how Ember learns that a remote model
thinks.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODELS = ("ok", "slow", "stall", "drop", "garbage", "html", "fail", "think", "reason", "tool",
          "agent")
THINKING = ("The user", " greets me;", " I should greet", " back.")
ANSWER = ("Hello", " there", "!")
CALLS = (  # (id, name, argument pieces) of the tool model's two parallel calls
    ("call_ab12", "get_weather", ('{"city":', ' "Paris",', ' "unit": "°C"}')),
    ("call_cd34", "get_time", ('{"zone": "Europe/Paris"}',)),
)
CAPABILITIES = {"think": ["completion", "thinking"], "reason": ["completion", "thinking"],
                "tool": ["completion", "tools", "thinking"], "agent": ["completion", "tools"]}
# what /api/show says of models that answer as `ok` does: `sees` lists vision
SHOWN = {"sees": ["completion", "vision"]}
AGENT_SAYS = "The tool said: "


def _chunk(text: str, finish: str | None = None) -> bytes:
    return _delta_chunk({"content": text}, finish)


def _delta_chunk(delta: dict, finish: str | None = None) -> bytes:
    body = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


def script(model: str, request: dict) -> tuple[list[dict], str]:
    """The deltas a thinking or tool model streams for `request`, and its finish reason."""
    if model == "agent":
        return agent_script(request)
    field = "reasoning" if model == "reason" else "reasoning_content"
    kwargs = request.get("chat_template_kwargs") or {}
    thinks = kwargs.get("enable_thinking", True) is not False
    deltas = [{field: piece} for piece in THINKING] if thinks else []
    if model != "tool":
        return deltas + [{"content": piece} for piece in ANSWER], "stop"
    for index, (call_id, name, pieces) in enumerate(CALLS):
        deltas.append({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                       "function": {"name": name, "arguments": ""}}]})
        deltas += [{"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                   for piece in pieces]
    return deltas, "tool_calls"


def agent_script(request: dict) -> tuple[list[dict], str]:
    last = request["messages"][-1]
    if last.get("role") == "tool":
        return [{"content": AGENT_SAYS}, {"content": last.get("content") or ""}], "stop"
    call_id = f"call_{len(request['messages'])}"  # one id per turn, as a model's are
    return [{"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                             "function": {"name": "get_weather", "arguments": ""}}]},
            {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}]}
            ], "tool_calls"


def whole(deltas: list[dict], finish: str) -> dict:
    """The non-streamed answer those deltas add up to (chat.completion)."""
    message: dict = {"role": "assistant", "content": None}
    calls: dict[int, dict] = {}
    for d in deltas:
        for key in ("reasoning_content", "reasoning", "content"):
            if key in d:
                message[key] = (message.get(key) or "") + d[key]
        for c in d.get("tool_calls", []):
            call = calls.setdefault(c["index"], {"id": c.get("id"), "type": "function",
                                                 "function": {"name": "", "arguments": ""}})
            call["function"]["name"] += c["function"].get("name", "")
            call["function"]["arguments"] += c["function"]["arguments"]
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage(deltas)}


def usage(deltas: list[dict]) -> dict:
    thinking = sum(1 for d in deltas if "reasoning_content" in d or "reasoning" in d)
    return {"prompt_tokens": 12, "completion_tokens": len(deltas), "total_tokens": 12 + len(
        deltas), "completion_tokens_details": {"reasoning_tokens": thinking}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    slow_s = 3.0
    models_garbage = False
    requests: list[dict] = []  # every request body, in order (a list per fake_server)
    gate: threading.Event | None = None
    answer_gate: threading.Event | None = None

    def log_message(self, *args: object) -> None:  # keep test output clean
        pass

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _chunked(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_GET(self) -> None:  # http.server's naming
        if self.path != "/v1/models":
            return self._send(404, b'{"error": "no such path"}')
        if self.models_garbage:
            return self._send(200, b"<html>hello</html>", "text/html")
        data = [{"id": m, "object": "model", "created": 1, "owned_by": "fake"} for m in MODELS]
        self._send(200, json.dumps({"object": "list", "data": data}).encode())

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        request = json.loads(self.rfile.read(length))
        model = request.get("model")
        if self.path == "/api/show":  # Ollama's, which Ember's server answers too
            name = request.get("model") or request.get("name")
            return self._send(200, json.dumps({"template": "", "capabilities": CAPABILITIES.get(
                name) or SHOWN.get(name, ["completion"])}).encode())
        self.requests.append(request)
        if model in CAPABILITIES:
            return self._scripted(model, request)
        if model == "slow":
            time.sleep(self.slow_s)
        if model == "fail":
            return self._send(500, json.dumps({"error": {
                "message": "CUDA out of memory", "type": "server_error"}}).encode())
        if model == "html":
            return self._send(200, b"<html><body>Please log in</body></html>", "text/html")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if model == "garbage":
            self._chunked(_chunk("Hel"))
            self._chunked(b"data: {this is not json\n\n")
        elif model == "drop":
            for piece in ("The ", "answer ", "is "):
                self._chunked(_chunk(piece))
            # half a chunk, then the socket goes away: no terminating zero-length chunk
            self.wfile.write(b"40\r\ndata: {\"cho")
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        elif model == "stall":
            self._chunked(_chunk("Hel"))
            time.sleep(self.slow_s)
        else:
            for piece in ("Hello", " world"):
                self._chunked(_chunk(piece))
            self._chunked(_chunk("", "stop"))
            self._chunked(b"data: [DONE]\n\n")
        self._chunked(b"")


    def _scripted(self, model: str, request: dict) -> None:
        deltas, finish = script(model, request)
        if not request.get("stream"):
            return self._send(200, json.dumps(whole(deltas, finish)).encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._chunked(_delta_chunk({"role": "assistant", "content": None}))
        answered = 0  # answer pieces sent
        for delta in deltas:
            if "reasoning" in delta or "reasoning_content" in delta:
                self._chunked(_delta_chunk(delta))
                continue
            if answered == 0 and self.gate is not None:
                self.gate.wait(30)  # the test looks at the window while the model thinks
            if answered == 1 and self.answer_gate is not None:
                self.answer_gate.wait(30)  # ... and once it has started answering
            answered += 1
            self._chunked(_delta_chunk(delta))
        self._chunked(_delta_chunk({}, finish))  # finish_reason in a chunk of its own
        if (request.get("stream_options") or {}).get("include_usage"):
            self._chunked(f"data: {json.dumps({'choices': [], 'usage': usage(deltas)})}\n\n"
                          .encode())
        self._chunked(b"data: [DONE]\n\n")
        self._chunked(b"")


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that hang up (timeouts, cancels) are what the tests do on purpose


@contextmanager
def fake_server(slow_s: float = 3.0, models_garbage: bool = False,
                requests: list[dict] | None = None, gate: threading.Event | None = None,
                answer_gate: threading.Event | None = None) -> Iterator[str]:
    """A running fake on a free loopback port; yields its base URL (with /v1). Request
    bodies are appended to `requests`; the thinking models wait for `gate` before answering,
    and for `answer_gate` after their answer's first piece."""
    handler = type("FakeHandler", (Handler,), {
        "slow_s": slow_s, "models_garbage": models_garbage,
        "requests": requests if requests is not None else [], "gate": gate,
        "answer_gate": answer_gate})
    server = QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
