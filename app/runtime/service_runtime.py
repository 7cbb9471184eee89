"""The Runtime's interface answered by a running Ember service, so that a model is loaded once
for the window, the API and the CLI (issue 43).

The window, `ember run`/`ember chat` and the chat session use a subset of `Runtime`:
`submit`/`generate` (a Generation of Ember's events), `loaded`, `load`, `unload`, `store`,
`is_remote`, `count_prompt_tokens`, `tokenize`, `embed`, `serving`, `choose`, `hardware`,
`thinking_support`, `remote_models`. Here the ones that load or run a model go over HTTP to the
service's own API; the rest (what is installed, what a backend can do, what the fit model
plans, a template's thinking support) are the Runtime's own (ServiceRuntime is a Runtime that
starts no worker), reading the same data folder the service reads.

Generation streams `/v1/chat/completions` (`/v1/completions` for a raw prompt) through the
remote backend's client, which already maps every Ember event onto that wire and back: text,
thinking, tool calls, and Stats from `usage` (prompt, cached and completion tokens), with time
to first token timed as it arrives. Loads, unloads and the loaded list are Ember's own routes
(app.server.ember.models: every load setting, and each worker's pid).

A service that restarts is no failure of the front end: a request while it is down ends with
an error naming the service, and the next one connects afresh (httpx opens a new connection).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from app.hardware import HardwareProfile
from app.runtime.generation import Generation
from app.runtime.remote_streams import RemoteStreams
from app.runtime.runtime import LoadedModel, Runtime, Serving
from app.runtime.worker_handle import EventSink, Worker
from app.store import InstalledModel, Store
from backends.base import (
    CancelFlag,
    Event,
    GenerationRequest,
    LoadPlan,
)
from backends.errors import EmberError, InvalidRequestError, RemoteError
from backends.remote import Endpoint, RemoteBackend

CONNECT_TIMEOUT_S = 2.0  # a local service answers at once, or it is not there
ANSWER_TIMEOUT_S = 3.0  # whether it is up: asked from the window's thread, so short
LOAD_TIMEOUT_S = 600.0  # a load over HTTP waits as long as the load takes (minutes at most)
log = logging.getLogger(__name__)


class ServiceBackend(RemoteBackend):
    """The remote backend's client, speaking to Ember's own API: it names the service in its
    errors and sends Ember's extension fields: `backend` (SamplingFields.backend) when a
    backend is asked for, `truncate` for a front end's request that may drop old turns."""

    def __init__(self, endpoint: Endpoint, backend: str | None = None) -> None:
        super().__init__(endpoint)
        self.backend = backend

    @property
    def where(self) -> str:
        return f"the Ember service at {self.endpoint.url}"

    def generate(self, model: str, request: GenerationRequest,
                 cancelled: CancelFlag | None = None, stream: bool = True) -> Iterator[Event]:
        yield from super().generate(model, request, cancelled, stream)

    def body(self, model: str, request: GenerationRequest, stream: bool) -> dict:
        body = super().body(model, request, stream)
        if self.backend is not None:
            body["backend"] = self.backend
        if request.truncate and request.messages is not None:
            body["truncate"] = True  # the front end's context policy, run by the service
        return body


class ServiceRuntime(Runtime):
    """A Runtime whose models run in the Ember service at `url` (authenticated with `key`).

    A subclass so that every front end takes it where it takes a Runtime: the queries that
    read the data folder are the Runtime's own; everything that would start a worker here
    goes to the service instead, and `_worker` refuses, so no path loads a model twice."""
    is_service = True

    def __init__(self, url: str, key: str, store: Store | None = None,
                 hardware: HardwareProfile | None = None) -> None:
        super().__init__(store=store, hardware=hardware)
        self.url = url.rstrip("/")
        self._endpoint = Endpoint("Ember service", self.url, key)
        self._clients: dict[str | None, ServiceBackend] = {}  # by the backend asked for
        self._unanswered = False  # the last loaded-list call failed (said once per outage)
        self._http = httpx.Client(base_url=self.url,
                                  headers={"Authorization": f"Bearer {key}"},
                                  timeout=httpx.Timeout(LOAD_TIMEOUT_S, connect=CONNECT_TIMEOUT_S))

    @property
    def describe(self) -> str:
        return f"Using the Ember service at {self.url}"

    @property
    def api_key(self) -> str:
        """The service's key (from the data folder): what other programs send to its API."""
        return self._endpoint.api_key or ""

    # -- HTTP ------------------------------------------------------------------------------
    def _call(self, method: str, path: str, doing: str, **kw: Any) -> Any:
        """The JSON of one call; a RemoteError that names the service and what failed."""
        try:
            response = self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise RemoteError(f"the Ember service at {self.url} did not answer while {doing} "
                              f"({type(e).__name__}: {e}); is it running? "
                              "(`ember service status`)") from None
        if response.status_code != 200:
            said = response.text.strip()[:200] or "(empty body)"
            try:
                body = response.json()
            except ValueError:
                body = None
            if isinstance(body, dict):  # Ember's {"error": {"message": ...}}
                err = body.get("error", body)
                said = str(err.get("message", err) if isinstance(err, dict) else err)
            error = RemoteError(f"the Ember service at {self.url} refused {doing} (HTTP "
                                f"{response.status_code}): {said}", status=response.status_code)
            if response.status_code in (400, 404):
                raise InvalidRequestError(str(error)) from None
            raise error
        return response.json()

    def answers(self) -> bool:
        """Whether the service is up and takes the key (an authenticated call, answered at
        once even while it loads a model: the loaded list takes no lock)."""
        try:
            self._call("GET", "/ember/loaded", "checking it", timeout=ANSWER_TIMEOUT_S)
            return True
        except (RemoteError, InvalidRequestError):
            return False

    # -- what is here: read from the data folder, as the service reads it ------------------
    def serving(self, name: str | InstalledModel, backend: str | None = None,
                context: int | None = None) -> Serving:
        """As the service would serve it: its loaded worker's backend and context, else the
        choice and plan made here (the same machine, data folder and rules)."""
        ref = name.ref if isinstance(name, InstalledModel) else self.store.get(name).ref
        for lm in self.loaded():
            if lm.model.ref == ref and backend in (None, lm.backend) and (
                    context in (None, lm.plan.context)):
                planned = super().serving(name, lm.backend, lm.plan.context)
                return Serving(lm.backend, planned.capabilities, lm.plan.context, True,
                               planned.projector)
        return super().serving(name, backend, context)

    def in_process(self) -> Runtime:
        """A Runtime of this process's own on the same store and machine: where a front end
        goes when the service is gone for good."""
        return Runtime(store=self.store, hardware=self._hardware)

    # -- loading: the service's (app.server.ember.models) --------------------------------
    def _loaded_model(self, m: dict) -> LoadedModel:
        plan = LoadPlan(context=int(m["context"]), threads=int(m["threads"]),
                        gpu_layers=int(m["gpu_layers"]), reason=str(m["reason"]),
                        memory_bytes=int(m["memory_bytes"]),
                        gpu_memory_bytes=int(m["gpu_memory_bytes"]), quant=m.get("quant"),
                        kv_cache=str(m["kv_cache"]))
        pid = m.get("pid")
        return LoadedModel(self.store.get(m["model"]), plan, str(m["backend"]),
                           int(pid) if pid is not None else None)

    def loaded(self) -> list[LoadedModel]:
        """The service's loaded models, with their workers' pids (the same machine: the
        window shows their memory); none when it does not answer (said in the log)."""
        try:
            body = self._call("GET", "/ember/loaded", "listing its loaded models")
        except (RemoteError, InvalidRequestError) as e:
            # the window asks every 2 s: a restart or an outage is one line, not one a poll
            log.log(logging.DEBUG if self._unanswered else logging.WARNING, "%s", e)
            self._unanswered = True
            return []
        if self._unanswered:
            log.info("the Ember service at %s answers again", self.url)
            self._unanswered = False
        found = []
        for m in body.get("models", []):
            try:
                found.append(self._loaded_model(m))
            except EmberError:  # a model the service has that this data folder lost
                continue
        return found

    def loading(self) -> list[str]:
        try:
            return list(self._call("GET", "/health", "checking it").get("loading", []))
        except (RemoteError, InvalidRequestError):
            return []

    def load(self, name: str | InstalledModel, context: int | None = None,
             backend: str | None = None, gpu_layers: int | None = None,
             quant: str | None = None, kv_cache: str | None = None) -> LoadedModel:
        """Load in the service, with every setting a local load takes."""
        if isinstance(name, str) and self.is_remote(name):
            raise InvalidRequestError(f"{name} is a remote model: its server loads it")
        model = name if isinstance(name, InstalledModel) else self.store.get(name)
        body = {"model": model.ref, "context": context, "backend": backend,
                "gpu_layers": gpu_layers, "quant": quant, "kv_cache": kv_cache}
        answer = self._call("POST", "/ember/load", f"loading {model.ref}",
                            json={k: v for k, v in body.items() if v is not None})
        return self._loaded_model(answer)

    def unload(self, name: str) -> bool:
        if self.is_remote(name):
            return False
        ref = self.store.get(name).ref
        answer = self._call("POST", "/ember/unload", f"unloading {ref}", json={"model": ref})
        return bool(answer["unloaded"])

    def keep_alive(self, name: str, seconds: float | None) -> None:
        """The service keeps its own keep-alives."""

    def unload_idle(self) -> list[str]:
        return []  # the service unloads its idle models itself

    # -- generation ------------------------------------------------------------------------
    def submit(self, name: str, request: GenerationRequest, sink: EventSink | None = None,
               backend: str | None = None, context: int | None = None,
               keep_alive_s: float | None = None,
               check: Callable[[Serving], None] | None = None) -> Generation:
        """One request, streamed from the service (which loads the model if need be and
        applies its context policy). `context` and `keep_alive_s` are the service's."""
        request.validate()
        if check is not None and not self.is_remote(name):
            check(self.serving(name, backend, context))
        return self.generate(name, request, sink, backend)

    def generate(self, name: str, request: GenerationRequest, sink: EventSink | None = None,
                 backend: str | None = None) -> Generation:
        request.validate()
        client = self._clients.get(backend)
        if client is None:
            client = self._clients[backend] = ServiceBackend(self._endpoint, backend)
        return Generation(RemoteStreams(client, name), request, sink)

    def count_prompt_tokens(self, name: str, request: GenerationRequest,
                            backend: str | None = None) -> int:
        """The prompt's tokens as the service's model counts them: a one-token answer's
        usage (the service renders the template with the request's tools and thinking)."""
        from dataclasses import replace
        probe = replace(request, sampling=replace(request.sampling, max_tokens=1))
        _, stats = self.generate(name, probe, backend=backend).result()
        return stats.prompt_tokens

    def fit_context(self, name: str, request: GenerationRequest, backend: str | None = None,
                    context: int | None = None) -> int:
        """The service applies its context policy to each request it runs: here the count."""
        return self.count_prompt_tokens(name, request, backend)

    def _worker(self, name: str | InstalledModel, backend: str | None = None) -> Worker:
        raise InvalidRequestError(f"{getattr(name, 'ref', name)} runs in the Ember service at "
                                  f"{self.url}: this process starts no worker of its own")

    def _worker_with_context(self, model: InstalledModel, backend: str | None,
                             context: int | None) -> Worker:
        return self._worker(model, backend)

    def detokenize(self, name: str, sequences: list[list[int]]) -> list[str]:
        return [self._call("POST", "/detokenize", f"detokenizing for {name}",
                           json={"model": name, "tokens": s})["content"] for s in sequences]

    def tokenize(self, name: str, text: str) -> list[int]:
        body = self._call("POST", "/tokenize", f"tokenizing for {name}",
                          json={"model": name, "content": text})
        return [int(t) for t in body["tokens"]]

    def embed(self, name: str, texts: list[str]) -> tuple[list[list[float]], int]:
        if not texts:
            raise InvalidRequestError("no input to embed")
        body = self._call("POST", "/v1/embeddings", f"embedding with {name}",
                          json={"model": name, "input": texts})
        vectors = [d["embedding"] for d in sorted(body["data"], key=lambda d: d["index"])]
        return vectors, int(body.get("usage", {}).get("prompt_tokens", 0))

    def shutdown(self) -> None:
        """Close the connections; the service and its models stay."""
        self._http.close()
        for client in self._clients.values():
            client.close()
        super().shutdown()


def wait_until_answers(runtime: ServiceRuntime, timeout_s: float) -> bool:
    """Whether the service answers within `timeout_s` (a service that is restarting)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if runtime.answers():
            return True
        time.sleep(0.2)
    return False
