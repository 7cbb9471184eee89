"""The remote backend: any OpenAI-compatible server (vLLM, SGLang, llama-server, `ember serve`).

It lists the server's models, streams chat and completions over SSE, maps Ember's sampling
settings onto the request, and reports the same Stats as a local backend: token counts from
the server's `usage` when it sends one, time to first token and decode speed timed by Ember
as the stream arrives.
Tools, tool choice and thinking settings go upstream as OpenAI fields (plus vLLM's and
llama-server's `chat_template_kwargs`), the conversation's tool calls, tool results and
reasoning with them; the server's `reasoning_content`/`reasoning` and `tool_calls` deltas come
back as ReasoningEvent and ToolCallEvent (docs/wire-formats.md C.1-C.3).
Every way a server or network can fail becomes a RemoteError (or an ErrorEvent) whose message
names the endpoint and what went wrong; none escapes as an httpx traceback.

It runs in the app's process, not in a worker: see app/runtime/remote_streams.py for why.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from backends.base import (
    CancelFlag,
    DoneEvent,
    ErrorEvent,
    Event,
    FinishReason,
    GenerationRequest,
    Message,
    ReasoningEvent,
    SamplingParams,
    TokenEvent,
    ToolCall,
    ToolCallEvent,
)
from backends.errors import RemoteError
from backends.media import openai_parts
from backends.stats import request_stats

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 120.0  # between two chunks: a long prompt on a busy cluster can take a while
LIST_TIMEOUT_S = 10.0
DEFAULTS = SamplingParams()
SHOWN_BODY_CHARS = 200


@dataclass(frozen=True)
class Endpoint:
    name: str
    url: str  # the API base, ending in /v1 for most servers
    api_key: str | None = None
    timeout_s: float = READ_TIMEOUT_S

    @property
    def base(self) -> str:
        """`http://host:8000` means `http://host:8000/v1`; a URL with a path is taken as-is
        (OpenRouter's `/api/v1`, a proxy's own prefix)."""
        url = self.url.rstrip("/")
        return url + "/v1" if urlsplit(url).path in ("", "/") else url


@dataclass(frozen=True)
class RemoteModel:
    endpoint: str
    id: str
    created: int = 0
    owned_by: str = ""

    @property
    def ref(self) -> str:
        return f"{self.endpoint}/{self.id}"


def request_body(model: str, request: GenerationRequest, stream: bool) -> dict:
    """The OpenAI request for `request`. top_k, min_p and the repeat penalty are not OpenAI
    fields; vLLM, SGLang and llama-server accept them, so they are sent only when the user
    moved them off Ember's defaults (those are llama.cpp's; a remote engine has its own)."""
    s = request.sampling
    body: dict = {"model": model, "stream": stream, "temperature": s.temperature,
                  "top_p": s.top_p}
    if s.max_tokens is not None:
        body["max_tokens"] = s.max_tokens
    if s.seed is not None:
        body["seed"] = s.seed
    if s.stop:
        body["stop"] = list(s.stop)
    if s.top_k != DEFAULTS.top_k:
        body["top_k"] = s.top_k
    if s.min_p != DEFAULTS.min_p:
        body["min_p"] = s.min_p
    if s.repeat_penalty != DEFAULTS.repeat_penalty:
        # vLLM and SGLang call it repetition_penalty, llama-server repeat_penalty
        body["repetition_penalty"] = body["repeat_penalty"] = s.repeat_penalty
    if stream:
        body["stream_options"] = {"include_usage": True}
    if request.json_schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "response", "schema": request.json_schema}}
    elif request.json_mode:
        body["response_format"] = {"type": "json_object"}
    if request.messages is not None:
        body["messages"] = [wire_message(m) for m in request.messages]
        body.update(tool_fields(request))
        body.update(thinking_fields(request))
    else:
        body["prompt"] = request.prompt
    return body


def wire_message(m: Message) -> dict:
    """One turn in the OpenAI shape: an assistant's calls with their arguments as JSON text
    (content null when it said nothing else), its thinking as `reasoning_content` (the name
    llama-server, vLLM and LM Studio read back), a tool result with its call's id."""
    d: dict = {"role": m.role,
               "content": openai_parts(m.content, m.media) if m.media else m.content}
    if m.tool_calls:
        d["tool_calls"] = [{"id": c.id, "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments or "{}"}}
                           for c in m.tool_calls]
        if not m.content:
            d["content"] = None
    if m.reasoning:
        d["reasoning_content"] = m.reasoning
    if m.tool_call_id:
        d["tool_call_id"] = m.tool_call_id
    elif m.name and m.role == "tool":
        d["name"] = m.name  # a result without an id: the legacy form names its tool
    return d


def tool_fields(request: GenerationRequest) -> dict:
    """tools, tool_choice and parallel_tool_calls, sent only when tools are offered (or
    tool_choice says none), so a server without tool support sees the request it always did.
    parallel_tool_calls is explicit: llama-server makes one call only unless asked."""
    choice = request.tool_choice
    if not request.tools:
        return {}
    fields: dict = {
        "tools": [{"type": "function", "function": {"name": t.name,
                                                    "description": t.description,
                                                    "parameters": t.parameters}}
                  for t in request.tools],
        "tool_choice": ({"type": "function", "function": {"name": choice.name}}
                        if choice.mode == "function" else choice.mode),
    }
    if choice.mode != "none":
        fields["parallel_tool_calls"] = request.parallel_tool_calls
    return fields


def thinking_fields(request: GenerationRequest) -> dict:
    """Thinking on or off as `chat_template_kwargs.enable_thinking` (vLLM, SGLang,
    llama-server and LM Studio hand it to Qwen3-style templates), the effort as
    `reasoning_effort` (OpenAI, vLLM and llama-server for gpt-oss, Ollama). Nothing when the
    request keeps the model's default."""
    thinking = request.thinking
    fields: dict = {}
    if thinking.enabled is not None:
        fields["chat_template_kwargs"] = {"enable_thinking": thinking.enabled}
    if thinking.effort is not None and thinking.enabled is not False:
        fields["reasoning_effort"] = thinking.effort
    return fields


def _shown(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SHOWN_BODY_CHARS else text[:SHOWN_BODY_CHARS] + "..."


def _server_message(response: httpx.Response) -> str:
    """The error text a server put in its body: OpenAI's {"error": {"message"}}, Ollama's
    and vLLM's {"error": "..."} / {"message": ...}, FastAPI's {"detail": ...}, or the text."""
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        return _shown(response.text) if response.text.strip() else "(empty body)"
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            err = err.get("message") or err.get("detail") or err
        return _shown(str(err))
    return _shown(str(body))


class RemoteBackend:
    """One endpoint. Thread-safe: each request has its own streamed response on a shared
    connection pool."""
    name = "remote"
    tokenizes_while_stepping = False

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        self._client = httpx.Client(
            base_url=endpoint.base, headers=headers,
            timeout=httpx.Timeout(endpoint.timeout_s, connect=CONNECT_TIMEOUT_S))

    @property
    def where(self) -> str:
        return f"remote {self.endpoint.name!r} ({self.endpoint.base})"

    def close(self) -> None:
        self._client.close()

    # -- errors ----------------------------------------------------------------------------
    def _transport_error(self, e: httpx.HTTPError, doing: str) -> RemoteError:
        if isinstance(e, httpx.ConnectTimeout):
            return RemoteError(f"{self.where}: no connection within {CONNECT_TIMEOUT_S:.0f} s "
                               f"while {doing}; is the host up and the port open?")
        if isinstance(e, httpx.TimeoutException):
            return RemoteError(f"{self.where}: timed out after {self.endpoint.timeout_s:g} s "
                               f"without data while {doing}")
        if isinstance(e, httpx.ConnectError):
            return RemoteError(f"{self.where}: cannot connect while {doing} ({e}); is the "
                               "server running at that address?")
        if isinstance(e, httpx.RemoteProtocolError | httpx.ReadError):
            return RemoteError(f"{self.where}: the connection dropped while {doing} ({e})")
        return RemoteError(f"{self.where}: {type(e).__name__} while {doing}: {e}")

    def _status_error(self, response: httpx.Response, model: str | None) -> RemoteError:
        status, said = response.status_code, _server_message(response)
        if status in (401, 403):
            hint = ("the API key was rejected" if self.endpoint.api_key
                    else "it needs an API key")
            return RemoteError(f"{self.where} refused access (HTTP {status}): {hint}; set it "
                               f"with `ember remote add {self.endpoint.name} "
                               f"{self.endpoint.url} --api-key KEY` ({said})", status=status)
        if status == 404:
            what = f"has no model {model!r}" if model else "has no OpenAI API here"
            return RemoteError(f"{self.where} {what} (HTTP 404: {said})", status=status)
        if status == 429:
            return RemoteError(f"{self.where} is busy (HTTP 429): {said}", status=status)
        if status >= 500:
            return RemoteError(f"{self.where} failed with HTTP {status}: {said}", status=status)
        return RemoteError(f"{self.where} rejected the request (HTTP {status}): {said}",
                           status=status)

    # -- models ----------------------------------------------------------------------------
    def list_models(self) -> list[RemoteModel]:
        try:
            response = self._client.get("/models", timeout=httpx.Timeout(
                LIST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S))
        except httpx.HTTPError as e:
            raise self._transport_error(e, "listing its models") from None
        if response.status_code != 200:
            raise self._status_error(response, None)
        try:
            data = response.json()["data"]
            return [RemoteModel(self.endpoint.name, str(m["id"]), int(m.get("created") or 0),
                                str(m.get("owned_by") or "")) for m in data]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise RemoteError(f"{self.where}: /models did not answer with an OpenAI model list "
                              f"(got {_shown(response.text)!r})") from None

    def describe(self, model: str) -> tuple[list[str] | None, str | None]:
        """What the server says of `model` beyond the OpenAI API: its capabilities (Ollama's
        and Ember's `POST /api/show`) and its chat template (those, or llama-server's
        `GET /props`). (None, None) from a server that has neither (vLLM): never an error,
        since this only decides which controls the window shows."""
        root = self.endpoint.base.removesuffix("/v1")
        timeout = httpx.Timeout(LIST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        capabilities: list[str] | None = None
        template: str | None = None
        try:
            shown = self._client.post(f"{root}/api/show", json={"model": model},
                                      timeout=timeout)
            body = shown.json() if shown.status_code == 200 else {}
            if isinstance(body, dict):
                caps = body.get("capabilities")
                capabilities = [str(c) for c in caps] if isinstance(caps, list) else None
                template = body.get("template") if isinstance(body.get("template"), str) \
                    else None
            if not template:
                props = self._client.get(f"{root}/props", params={"model": model},
                                         timeout=timeout)
                body = props.json() if props.status_code == 200 else {}
                if isinstance(body, dict) and isinstance(body.get("chat_template"), str):
                    template = body["chat_template"]
        except (httpx.HTTPError, ValueError, UnicodeDecodeError):
            pass
        return capabilities, template or None

    # -- generation ------------------------------------------------------------------------
    def body(self, model: str, request: GenerationRequest, stream: bool) -> dict:
        """The JSON sent for `request` (a server that takes more, such as Ember's own, adds
        its fields in a subclass)."""
        return request_body(model, request, stream)

    def generate(self, model: str, request: GenerationRequest,
                 cancelled: CancelFlag | None = None, stream: bool = True) -> Iterator[Event]:
        """The events of one request; never raises for a server's or the network's failure:
        that is the final ErrorEvent, after the text already received."""
        if request.media:  # a raw prompt's: /completions takes text only
            yield ErrorEvent(f"{model} is a remote model: a raw prompt cannot carry images or "
                             "audio to it; send them in a chat's messages", "invalid")
            return
        path = "/chat/completions" if request.messages is not None else "/completions"
        run = Received(time.monotonic(), stops=request.sampling.stop)
        try:
            if stream:
                yield from self._stream(path, model, request, cancelled, run)
            else:
                yield from self._whole(path, model, request, run)
        except RemoteError as e:
            yield ErrorEvent(str(e), "backend", partial="".join(run.text))
        except httpx.HTTPError as e:
            doing = ("streaming the answer, after "
                     f"{sum(len(t) for t in run.text)} characters") if run.text else "answering"
            yield ErrorEvent(str(self._transport_error(e, doing)), "backend",
                             partial="".join(run.text))

    def _whole(self, path: str, model: str, request: GenerationRequest,
               run: Received) -> Iterator[Event]:
        response = self._client.post(path, json=self.body(model, request, stream=False))
        if response.status_code != 200:
            raise self._status_error(response, model)
        try:
            body = response.json()
            choice = body["choices"][0]
            events = (message_events(choice["message"]) if "message" in choice
                      else [TokenEvent(choice["text"])] if choice["text"] else [])
            run.finish = choice.get("finish_reason")
            run.matched(choice)
            run.usage = body.get("usage")
        except (ValueError, KeyError, IndexError, TypeError, UnicodeDecodeError):
            raise self._garbage(response.text) from None
        for event in events:
            run.record(event)
            yield event
        yield run.done()

    def _garbage(self, text: str) -> RemoteError:
        return RemoteError(f"{self.where} sent something that is not an OpenAI-compatible "
                           f"answer: {_shown(text)!r}")

    def _stream(self, path: str, model: str, request: GenerationRequest,
                cancelled: CancelFlag | None, run: Received) -> Iterator[Event]:
        body = self.body(model, request, stream=True)
        # Leaving the `with` closes the response: that is how a cancel reaches the server
        # (Ember's own server, vLLM and llama-server stop generating when the client leaves).
        with self._client.stream("POST", path, json=body) as response:
            if response.status_code != 200:
                response.read()
                raise self._status_error(response, model)
            if "text/event-stream" not in response.headers.get("content-type", ""):
                raise self._garbage(response.read().decode("utf-8", "replace"))
            for line in response.iter_lines():
                if cancelled is not None and cancelled.is_set():
                    run.finish = "cancelled"
                    yield run.done()
                    return
                if not line.startswith("data:"):
                    continue  # SSE comments, event: and id: lines, blank separators
                data = line[5:].strip()
                if data == "[DONE]":
                    yield run.done()
                    return
                try:
                    chunk = json.loads(data)
                except ValueError:
                    raise self._garbage(data) from None
                if not isinstance(chunk, dict):
                    raise self._garbage(data)
                if "error" in chunk:  # a failure after the stream began (Ember, vLLM)
                    err = chunk["error"]
                    said = err.get("message", err) if isinstance(err, dict) else err
                    raise RemoteError(f"{self.where} failed in the middle of the answer: "
                                      f"{_shown(str(said))}")
                events = run.chunk(chunk)
                if events is None:
                    raise self._garbage(data)
                yield from events
        if run.finish is None:
            got = sum(len(t) for t in run.text)
            raise RemoteError(f"{self.where}: the stream ended in the middle of the answer "
                              f"(after {got} characters, with no finish reason); the text "
                              "received so far is kept")
        yield run.done()  # no [DONE], but the server said why it finished: a complete answer


def _reasoning_of(d: dict) -> str:
    """A message's or delta's thinking: `reasoning_content` (llama-server, DeepSeek, vLLM's
    older name) or `reasoning` (vLLM since PR #27752, Ollama's /v1, OpenRouter)."""
    for key in ("reasoning_content", "reasoning"):
        if isinstance(d.get(key), str) and d[key]:
            return d[key]
    return ""


def message_events(message: dict) -> list[Event]:
    """A non-streamed answer's message as the events a stream of it would have given."""
    events: list[Event] = []
    if reasoning := _reasoning_of(message):
        events.append(ReasoningEvent(reasoning))
    if isinstance(message.get("content"), str) and message["content"]:
        events.append(TokenEvent(message["content"]))
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        arguments = function.get("arguments") or ""
        if not isinstance(arguments, str):  # Ollama-style object arguments
            arguments = json.dumps(arguments, ensure_ascii=False)
        events.append(ToolCallEvent(i, arguments, call.get("id") or _call_id(),
                                    function["name"]))
    return events


def _call_id() -> str:
    # for a server that sends calls without ids: the result must name its call to go back
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class _Call:
    id: str
    name: str
    arguments: list[str]


@dataclass
class Received:
    """What one request has received so far, and when; `done()` makes its Stats."""
    started: float
    first: float | None = None
    last: float | None = None
    chunks: int = 0
    finish: str | None = None
    usage: dict | None = None
    stops: tuple[str, ...] = ()  # the request's stop strings
    stop_sequence: str | None = None  # the one that ended the answer, if the server says

    def __post_init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, _Call] = {}  # by the server's index, in order of arrival

    def _arrived(self) -> None:
        now = time.monotonic()
        self.first = self.first or now
        self.last = now
        self.chunks += 1

    def token(self, text: str) -> None:
        if not text:
            return
        self._arrived()
        self.text.append(text)

    def record(self, event: Event) -> None:
        """Count an event of the answer (text, thinking or a piece of a call)."""
        if isinstance(event, TokenEvent):
            self.token(event.text)
        elif isinstance(event, ReasoningEvent) and event.text:
            self._arrived()
            self.reasoning.append(event.text)
        elif isinstance(event, ToolCallEvent):
            self._arrived()
            call = self.calls.setdefault(event.index, _Call(event.id, event.name, []))
            call.arguments.append(event.arguments)

    def matched(self, choice: dict) -> None:
        """Which stop string ended the answer: vLLM says so in the choice's `stop_reason`
        (a stop token's id there is not one of the request's strings); OpenAI and
        llama-server do not, and then it stays unknown."""
        said = choice.get("stop_reason")
        if isinstance(said, str) and said in self.stops:
            self.stop_sequence = said

    def chunk(self, chunk: dict) -> list[Event] | None:
        """The events of one stream chunk (chat delta or completion text); None if the chunk
        is not a valid one."""
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        if choices is None and self.usage is not None:
            return []  # a usage-only chunk
        if not isinstance(choices, list):
            return None
        events: list[Event] = []
        for choice in choices[:1]:
            if not isinstance(choice, dict):
                return None
            delta = choice.get("delta")
            if isinstance(delta, dict):
                delta_events = self._delta(delta)
                if delta_events is None:
                    return None
                events += delta_events
            elif isinstance(choice.get("text"), str) and choice["text"]:
                events.append(TokenEvent(choice["text"]))
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
                self.matched(choice)
        for event in events:
            self.record(event)
        return events

    def _delta(self, delta: dict) -> list[Event] | None:
        """One chat delta: thinking, then text, then pieces of calls (a server sends one kind
        per delta, docs/wire-formats.md C.3, but one that mixes them loses nothing)."""
        events: list[Event] = []
        if reasoning := _reasoning_of(delta):
            events.append(ReasoningEvent(reasoning))
        if isinstance(delta.get("content"), str) and delta["content"]:
            events.append(TokenEvent(delta["content"]))
        calls = delta.get("tool_calls") or []
        if not isinstance(calls, list):
            return None
        started: set[int] = set()  # calls whose first piece is in this very delta
        for position, call in enumerate(calls):
            if not isinstance(call, dict):
                return None
            index = call.get("index", position)
            function = call.get("function") or {}
            if not isinstance(index, int) or not isinstance(function, dict):
                return None
            arguments = function.get("arguments") or ""
            if not isinstance(arguments, str):  # a whole call with object arguments
                arguments = json.dumps(arguments, ensure_ascii=False)
            if index in self.calls or index in started:
                events.append(ToolCallEvent(index, arguments))  # id and name came first
            else:
                name = function.get("name")
                if not isinstance(name, str) or not name:
                    return None  # a call's first piece must name its tool
                started.add(index)
                events.append(ToolCallEvent(index, arguments, str(call.get("id") or _call_id()),
                                            name))
        return events

    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The calls received whole: after `length` or a cancel, a call whose arguments are
        not yet a JSON object was cut off and is left out (backends.base.DoneEvent)."""
        calls = []
        for call in self.calls.values():
            arguments = "".join(call.arguments) or "{}"
            if self.finish in ("length", "cancelled"):
                try:
                    if not isinstance(json.loads(arguments), dict):
                        continue
                except ValueError:
                    continue
            calls.append(ToolCall(call.id, call.name, arguments))
        return tuple(calls)

    def done(self) -> DoneEvent:
        usage = self.usage if isinstance(self.usage, dict) else {}
        # Without usage (a server that ignores stream_options) a chunk is about one token.
        completion = int(usage.get("completion_tokens") or self.chunks)
        details = usage.get("prompt_tokens_details") or {}
        out_details = usage.get("completion_tokens_details") or {}
        calls = self.tool_calls()
        finish: FinishReason = ("cancelled" if self.finish == "cancelled" else
                                "length" if self.finish == "length" else
                                # like Ollama's OpenAI layer: an answer that called tools ended
                                # for that, whatever a server says (some say "stop")
                                "tool_calls" if calls else "stop")
        stats = request_stats(
            prompt_tokens=int(usage.get("prompt_tokens") or 0), completion_tokens=completion,
            started=self.started, first_at=self.first, last_at=self.last,
            end=time.monotonic(), finish_reason=finish,
            truncated=usage.get("truncated") is True,  # Ember's extension (a served window's)
            cached_tokens=int(details.get("cached_tokens") or 0)
            if isinstance(details, dict) else 0,
            reasoning_tokens=int(out_details.get("reasoning_tokens") or 0)
            if isinstance(out_details, dict) else 0,
            stop_sequence=self.stop_sequence if finish == "stop" else None)
        return DoneEvent(stats, "".join(self.text), "".join(self.reasoning), calls)
