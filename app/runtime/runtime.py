"""The Runtime: the one API front ends use to list, load, generate, cancel and unload.

Each loaded model runs in a worker process (multiprocessing, spawn; app.runtime.worker_handle).
A crash in native code kills only the worker: requests in flight end with an
ErrorEvent(kind="crash") that says so, and the next request for that model starts a fresh
worker. The Runtime also owns the memory budget: idle models unload after a TTL, and the
least recently used idle ones are evicted when the fit model says a new one would not fit.

A model reference routes to its backend per model: `NAME/model` goes to the remote endpoint
NAME (config.toml, app.runtime.endpoints), generated in this process (app.runtime.remote_streams
says why); a local model goes to a worker running the backend app.runtime.backend_choice picks
for it (or the one a request, config.toml or the Runtime's `backend` asks for). What each
backend can do is in app.runtime.backend_table.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from app.config import kv_cache_bytes
from app.errors import ModelBusyError
from app.fit import plan_for
from app.fit.plan import with_gpu_layers
from app.hardware import HardwareProfile, detect
from app.runtime import endpoints
from app.runtime.backend_choice import (
    BackendChoice,
    choose_backend,
    configured_backend,
    preferred_format,
)
from app.runtime.backend_table import capabilities, check_backend
from app.runtime.generation import Generation
from app.runtime.memory_pools import Pools, Use, total
from app.runtime.protocol import CountPromptTokens, Detokenize, Embed, Tokenize
from app.runtime.remote_streams import Remotes
from app.runtime.thinking import ThinkingSupport, local_support
from app.runtime.worker_handle import EventSink, Worker
from app.store import InstalledModel, Store
from backends.base import Capabilities, GenerationRequest, LoadPlan, PromptTooLong
from backends.errors import EmberError, InvalidRequestError
from backends.prompt import answer_room, prompt_limit
from backends.remote import RemoteModel

QUANTS = ("int8", "int4", "fp8")  # weight formats the cuda backend packs at load (kernels/quant.py)
LARGEST_CONTEXT = 1 << 30  # asks the fit model for the most it gives (the trained context caps it)
MAX_DRAFTS = 2  # draft models one loaded model keeps beside it (each counts in the budget)
RELOAD_WAIT_S = 120.0  # how long a reload waits for other requests' answers to end
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedModel:
    model: InstalledModel
    plan: LoadPlan
    backend: str
    pid: int | None


@dataclass(frozen=True)
class Serving:
    """How a local model runs a request: on which backend, what that backend can do, and
    the context it has (`loaded`) or will have when this request loads it."""
    backend: str
    capabilities: Capabilities
    context: int
    loaded: bool
    # the model has a multimodal projector (InstalledModel.projector): it sees images (and
    # hears, where the projector does); without one it reads text only
    projector: bool = False


class Runtime:
    is_service = False  # ServiceRuntime's models run in a running Ember service instead

    def __init__(self, store: Store | None = None, hardware: HardwareProfile | None = None,
                 backend: str | None = None, idle_ttl_s: float | None = None,
                 parallel: int = 1) -> None:
        self.store = store or Store()
        self.parallel = parallel  # sequences decoded together per model (the fit may cut it)
        self._hardware = hardware
        self.backend = backend  # None: app.runtime.backend_choice picks per model
        self.idle_ttl_s = idle_ttl_s  # None: models stay loaded until unloaded
        self._workers: dict[str, Worker] = {}
        self.remotes = Remotes(self.store.paths)
        self._thinking: dict[str, ThinkingSupport] = {}  # model ref -> from its template
        self._lock = threading.Lock()  # held through a load: minutes
        self._loading: dict[str, str] = {}  # model ref -> backend, while its worker starts
        self.reload_wait_s = RELOAD_WAIT_S

    @property
    def hardware(self) -> HardwareProfile:
        if self._hardware is None:
            self._hardware = detect()
        return self._hardware

    def list_models(self) -> list[InstalledModel]:
        return self.store.list()

    # -- remote models ---------------------------------------------------------------------
    @staticmethod
    def is_remote(name: str) -> bool:
        return endpoints.split_ref(name) is not None

    def remote_models(self) -> tuple[list[RemoteModel], dict[str, str]]:
        """The models of every remote endpoint, and why an endpoint could not list them."""
        return self.remotes.models()

    def check_model(self, name: str) -> None:
        """A ModelNotFoundError now (an API's 404) for a model that does not exist, local or
        remote; an unreachable endpoint is its RemoteError."""
        if not self.is_remote(name):
            self.store.get(name)
            return
        self.remotes.check(name)

    def remote_sees(self, name: str) -> bool | None:
        """Whether the remote model `name`'s server lists vision for it (None: it lists no
        capabilities, and says when an image comes). Asks a server: off the UI thread."""
        return self.remotes.sees(name)

    def thinking_support(self, name: str) -> ThinkingSupport:
        """What the Think control of model `name` offers (from its chat template, or for a
        remote model what its server says). Reads a file or asks a server: call it off the UI
        thread. A model whose template cannot be read offers none."""
        if self.is_remote(name):
            return self.remotes.thinking_support(name)
        model = self._installed(name)
        with self._lock:
            known = self._thinking.get(model.ref)
        if known is None:
            try:
                known = local_support(model.path, model.format)
            except EmberError as e:
                log.warning("no thinking support for %s: %s", model.ref, e)
                known = ThinkingSupport()
            with self._lock:
                self._thinking[model.ref] = known
        return known

    # -- local models ----------------------------------------------------------------------
    def _installed(self, name: str | InstalledModel) -> InstalledModel:
        """The installed model `name` names; of an id installed in several formats, the one
        this machine prefers (MLX on Apple Silicon). A model already resolved is itself: a
        request resolves its name once (`submit`) and passes the model on."""
        if isinstance(name, InstalledModel):
            return name
        return self.store.get(name, prefer=preferred_format(self.hardware))

    def choose(self, model: InstalledModel, requested: str | None = None) -> BackendChoice:
        if requested is None and self.backend is not None:
            return BackendChoice(check_backend(self.backend), "set for this Runtime")
        return choose_backend(self.hardware, formats=(model.format,), requested=requested,
                              configured=configured_backend(model.id, self.store.paths),
                              model=(model.architecture, model.quant))

    def serving(self, name: str | InstalledModel, backend: str | None = None,
                context: int | None = None) -> Serving:
        """How the local model `name` would run a request now (`backend` and `context` as the
        request asks), without loading it: what its worker has when one runs it as asked, else
        the backend choice and the load plan a load would make. Front ends check a request
        against it before anything starts (a context too small, a grammar it cannot run)."""
        model = self._installed(name)
        with self._lock:
            worker = self._workers.get(model.ref)
        if worker is not None and worker.alive and backend in (None, worker.backend) and (
                context in (None, worker.plan.context)):
            return Serving(worker.backend, worker.capabilities, worker.plan.context, True,
                           model.projector is not None)
        chosen = self.choose(model, backend).name
        return Serving(chosen, capabilities(chosen), self._plan(model, context, chosen).context,
                       False, model.projector is not None)

    def loaded(self) -> list[LoadedModel]:
        """The models loaded now. Lock-free (a dict copy is atomic): health checks and
        metrics answer while a load holds the lock for minutes."""
        return [LoadedModel(w.model, w.plan, w.backend, w.pid)
                for w in self._workers.copy().values() if w.alive]

    def loading(self) -> list[str]:
        """The models whose workers are starting now (lock-free, as `loaded`)."""
        return sorted(self._loading.copy())

    def load(self, name: str | InstalledModel, context: int | None = None,
             backend: str | None = None,
             gpu_layers: int | None = None, quant: str | None = None,
             kv_cache: str | None = None) -> LoadedModel:
        """Load a local model (in the backend `backend`, or the one chosen for it).
        `gpu_layers` overrides the plan's GPU offload (the user's setting; -1: all);
        `kv_cache` ("f16", "q8_0") the KV cache type the plan would pick (llama.cpp's);
        `quant` ("int8", "int4", "fp8") packs the weights at load (the cuda backend's kernels)."""
        if isinstance(name, str) and self.is_remote(name):
            raise InvalidRequestError(f"{name} is a remote model: its server loads it")
        model = self._installed(name)
        backend = self.choose(model, backend).name
        if quant is not None and (quant not in QUANTS or backend != "cuda"):
            raise InvalidRequestError(
                f"weights packed at load ({quant}) are the cuda backend's "
                f"({', '.join(QUANTS)}); the {backend} backend runs the quantization of the "
                f"model's files: pick a quantization when pulling instead (MODEL:QUANT)"
                if quant in QUANTS else f"unknown weight format {quant!r} (use "
                f"{' or '.join(QUANTS)})")
        def as_asked(w: Worker) -> bool:
            return w.backend == backend and (
                context is None or w.plan.context == context) and (
                gpu_layers is None or w.asked_gpu_layers == gpu_layers) and (
                kv_cache is None or w.plan.kv_cache == kv_cache) and w.plan.quant == quant

        with self._lock:
            worker = self._workers.get(model.ref)
        if worker is not None and worker.alive and not as_asked(worker):
            self._wait_idle(worker)  # others' answers end first: a reload would cut them
        with self._lock:
            worker = self._workers.get(model.ref)
            if worker is not None and worker.alive and as_asked(worker):
                return LoadedModel(model, worker.plan, worker.backend, worker.pid)
            if worker is not None and worker.alive and worker.busy:
                raise ModelBusyError(
                    f"{model.ref} is answering other requests on {worker.backend} with a "
                    f"{worker.plan.context}-token context; reloading it "
                    f"({_changes(worker, backend, context, gpu_layers, quant)}) would end "
                    f"their answers, and they did not finish in {self.reload_wait_s:g} s: "
                    "ask again later, or without the context or backend setting")
            if worker is not None:
                if worker.alive:
                    log.info("reloading %s on %s: %s", model.ref, backend,
                             _changes(worker, backend, context, gpu_layers, quant))
                else:
                    log.warning("restarting %s on %s: its worker (pid %s) is gone", model.ref,
                                backend, worker.pid)
                worker.stop()
                del self._workers[model.ref]
            plan = self._plan(model, context, backend, quant, kv_cache)
            if gpu_layers is not None:
                plan = replace(with_gpu_layers(model, backend, self.hardware, plan, gpu_layers),
                               reason=f"{plan.reason}; GPU layers set to {gpu_layers} by the user")
            self._make_room(plan, model.ref)
            self._loading[model.ref] = backend
            try:
                worker = Worker(model, plan, backend)
            finally:
                del self._loading[model.ref]
            if worker.plan.gpu_layers != plan.gpu_layers:  # fewer: the GPU could not hold it
                worker.plan = with_gpu_layers(model, backend, self.hardware, worker.plan,
                                              worker.plan.gpu_layers)
            self._workers[model.ref] = worker
            return LoadedModel(model, worker.plan, worker.backend, worker.pid)

    def fit_context(self, name: str, request: GenerationRequest, backend: str | None = None,
                    context: int | None = None) -> int:
        """Make the local model `name` ready to take `request` whole, and return its prompt's
        tokens. The model is loaded first if it is not (with `context` where the request asks
        for one, else as it is or by its default plan) and counts the prompt with its own
        template and tokenizer. A prompt that does not fit with room for its answer reloads
        the model with the largest context the fit model gives it here (not just enough: a
        growing agent conversation should not reload every turn), with a q8_0 KV cache where
        that fits more. Too long even for that, or for the `context` asked for, is an
        InvalidRequestError naming the numbers: a prompt is never cut silently."""
        worker = self._worker_with_context(self._installed(name), backend, context)
        max_tokens = request.sampling.max_tokens
        tokens = worker.call(lambda cid: CountPromptTokens(cid, request))
        if tokens <= prompt_limit(worker.plan.context, max_tokens):
            return tokens
        self._larger_context(worker, tokens, max_tokens, context)
        return tokens

    def _larger_context(self, worker: Worker, tokens: int, max_tokens: int | None,
                        context: int | None) -> Worker:
        """The one context policy for a prompt of `tokens` that `worker`'s context cannot
        take whole: the model reloaded with the largest context the fit model gives it here,
        or, where even that (or the `context` the request asked for) is too small, the
        InvalidRequestError that names the numbers."""
        ref = worker.model.ref
        if context is not None:
            raise prompt_too_long(tokens, max_tokens, context,
                                  f"the context asked for ({ref})", "ask for a larger one")
        largest = self._plan(worker.model, LARGEST_CONTEXT, worker.backend, worker.plan.quant)
        if tokens > prompt_limit(largest.context, max_tokens) or (
                largest.context <= worker.plan.context):
            raise prompt_too_long(tokens, max_tokens, largest.context,
                                  f"the largest context this machine can give {ref} "
                                  f"({largest.reason})", "use a model with a longer context")
        log.info("reloading %s with a %d-token context: a %d-token prompt does not fit its %d",
                 ref, largest.context, tokens, worker.plan.context)
        self.load(worker.model, largest.context, worker.backend, quant=worker.plan.quant)
        with self._lock:
            return self._workers[ref]

    def _worker_with_context(self, model: InstalledModel, backend: str | None,
                             context: int | None) -> Worker:
        if context is None:
            return self._worker(model, backend)
        self.load(model, context, backend)
        with self._lock:
            return self._workers[model.ref]

    def _wait_idle(self, worker: Worker) -> None:
        """Let the answers running on `worker` end before it is reloaded (at most
        `reload_wait_s`: then the load that asked is refused, ModelBusyError; other
        requests' answers are never cut by it)."""
        deadline = time.monotonic() + self.reload_wait_s
        while worker.busy and worker.alive and time.monotonic() < deadline:
            time.sleep(0.05)

    def _plan(self, model: InstalledModel, context: int | None,
              backend: str = "llamacpp", quant: str | None = None,
              kv_cache: str | None = None) -> LoadPlan:
        plan = plan_for(model, backend, self.hardware, context, self.parallel, quant, kv_cache)
        # conversations kept across restarts: only the llama.cpp backend saves its caches
        limit = kv_cache_bytes() if backend == "llamacpp" else 0
        if not limit:
            return plan
        return replace(plan, kv_store=str(self.store.paths.kv_cache), kv_store_bytes=limit)

    def _in_use(self, pools: Pools) -> Use:
        return total([pools.use(w.plan, sum(w.drafts.values()))
                      for w in self._workers.values()])

    def _make_room(self, plan: LoadPlan, for_ref: str) -> None:
        """Unload idle models, least recently used first, until `plan` fits beside the rest
        in the fit model's budgets (GPU memory and RAM where the GPU has its own: a model on
        the CPU does not make room on the GPU's account, nor the reverse). Called with the
        lock held. Busy models are never evicted."""
        pools = Pools.of(self.hardware)
        needed = pools.use(plan)
        for ref, w in sorted(self._workers.items(), key=lambda kv: kv[1].last_used):
            short = pools.short(self._in_use(pools), needed)
            if short is None:
                return
            if w.busy:
                continue
            name, in_use, budget = short
            log.info("evicting %s (idle %.0f s, %.2f GB): %s needs %.2f GB and %.2f GB of the "
                     "%.2f GB %sbudget are in use", ref, time.monotonic() - w.last_used,
                     w.memory_bytes / 1e9, for_ref, needed[0 if name == "GPU" else 1] / 1e9,
                     in_use / 1e9, budget / 1e9, f"{name} " if name else "")
            w.stop()
            del self._workers[ref]
        short = pools.short(self._in_use(pools), needed)
        if short is not None:
            name, in_use, budget = short
            log.warning("loading %s (%.2f GB) beyond the %.2f GB %sbudget: %.2f GB are in use "
                        "by busy models, which are never evicted", for_ref,
                        needed[0 if name == "GPU" else 1] / 1e9, budget / 1e9,
                        f"{name} " if name else "", in_use / 1e9)

    def _worker(self, name: str | InstalledModel, backend: str | None = None) -> Worker:
        if isinstance(name, str) and self.is_remote(name):
            raise InvalidRequestError(f"{name} is a remote model: tokenize and embed run on "
                                      "local models only")
        model = self._installed(name)
        with self._lock:
            worker = self._workers.get(model.ref)
        if worker is None or not worker.alive or (backend is not None
                                                  and worker.backend != backend):
            context: int | None = None
            quant: str | None = None
            if worker is not None:  # reload as it was: same context, and quant in its backend
                context = worker.plan.context
                quant = worker.plan.quant if backend in (None, worker.backend) else None
            self.load(model, context, backend, quant=quant)
            with self._lock:
                worker = self._workers[model.ref]
        return worker

    def submit(self, name: str, request: GenerationRequest, sink: EventSink | None = None,
               backend: str | None = None, context: int | None = None,
               keep_alive_s: float | None = None,
               check: Callable[[Serving], None] | None = None) -> Generation:
        """One request, whole: the entry the server's routes use. A local model's name is
        resolved once; `check` sees how it would be served (a front end's refusals, before
        anything loads); it is loaded (with `context` where the request asks for one) and
        the generation starts in its worker, whose first step renders and tokenizes the
        prompt (the only time it is) and answers Admitted or PromptTooLong. On PromptTooLong
        the one context policy applies (`_larger_context`: reload larger and start again, or
        the InvalidRequestError naming the numbers); a prompt is never cut for a request
        that may not be cut. The Generation returned is admitted (`admitted` says its
        prompt's tokens) or carries its backend's error as its first event. `keep_alive_s`:
        as `keep_alive`. A remote model is checked with its server and generated there."""
        request.validate()
        if self.is_remote(name):
            self.remotes.check(name)
            return self.generate(name, request, sink, backend)
        model = self._installed(name)
        if check is not None:
            check(self.serving(model, backend, context))
        worker = self._worker_with_context(model, backend, context)
        while True:
            generation = Generation(worker, self._with_draft(request, worker), sink,
                                    hold_too_long=True)
            verdict = generation.admission()
            if not isinstance(verdict, PromptTooLong):
                break
            generation.close()  # nothing was queued; a second refusal raises (no larger one)
            worker = self._larger_context(worker, verdict.tokens, request.sampling.max_tokens,
                                          context)
        if keep_alive_s is not None:
            worker.keep_alive_s = keep_alive_s
        return generation

    def generate(self, name: str, request: GenerationRequest, sink: EventSink | None = None,
                 backend: str | None = None) -> Generation:
        """Start a generation; `backend` asks for one backend for this request (a model
        loaded in another is reloaded). Remote models ignore it: their server decides."""
        request.validate()
        if self.is_remote(name):
            if request.speculative is not None and request.speculative.by_default:
                request = replace(request, speculative=None)  # its server has its own
            if request.speculative is not None:
                raise InvalidRequestError(f"{name} is a remote model: speculative decoding "
                                          "runs on local models (the remote server has its own)")
            return Generation(self.remotes.host(name), request, sink)
        worker = self._worker(name, backend)
        return Generation(worker, self._with_draft(request, worker), sink)

    def _with_draft(self, request: GenerationRequest, worker: Worker) -> GenerationRequest:
        """The request with its draft model's path filled in (checked here: a worker cannot
        look models up, and a wrong name should fail before anything runs). Drafts are
        bounded: smaller than their model, at most MAX_DRAFTS per loaded model, and their
        weights count in the memory budget (the worker keeps them loaded beside the model)."""
        model = worker.model
        spec = request.speculative
        if spec is None or spec.method != "draft":
            return request
        assert spec.draft_model is not None  # request.validate() requires one for "draft"
        if self.is_remote(spec.draft_model):
            raise InvalidRequestError(f"the draft model must be a local model, not "
                                      f"{spec.draft_model}")
        draft = self.store.get(spec.draft_model)
        if draft.ref == model.ref:
            raise InvalidRequestError(f"{draft.ref} cannot be its own draft model: pick a "
                                      "smaller model with the same tokenizer")
        if draft.format != model.format:
            raise InvalidRequestError(f"the draft model {draft.ref} is {draft.format} but "
                                      f"{model.ref} is {model.format}: the draft must be in "
                                      "the same format")
        if draft.size_bytes >= model.size_bytes:
            raise InvalidRequestError(
                f"the draft model {draft.ref} ({draft.size_bytes / 1e9:.2f} GB) is not smaller "
                f"than {model.ref} ({model.size_bytes / 1e9:.2f} GB): a draft must be a smaller "
                "model of the same family", "speculative.draft_model")
        with self._lock:
            if draft.ref not in worker.drafts:
                if len(worker.drafts) >= MAX_DRAFTS:
                    raise InvalidRequestError(
                        f"{model.ref} keeps {', '.join(worker.drafts)} as draft models while "
                        f"loaded, at most {MAX_DRAFTS}: draft with one of them, or unload "
                        f"{model.ref} first", "speculative.draft_model")
                pools = Pools.of(self.hardware)
                worker_use = pools.use(worker.plan)
                needed = pools.use(replace(worker.plan, memory_bytes=draft.size_bytes,
                                           gpu_memory_bytes=draft.size_bytes
                                           if worker_use[0] > worker_use[1] else 0))
                short = pools.short(self._in_use(pools), needed)
                if short is not None:
                    name, in_use, budget = short
                    raise InvalidRequestError(
                        f"no memory for the draft model {draft.ref} "
                        f"({draft.size_bytes / 1e9:.2f} GB): {in_use / 1e9:.2f} GB of the "
                        f"{budget / 1e9:.2f} GB {name + ' ' if name else ''}budget are in use",
                        "speculative.draft_model")
                worker.drafts[draft.ref] = draft.size_bytes
        return replace(request, speculative=replace(spec, draft_path=str(draft.path)))

    def tokenize(self, name: str, text: str) -> list[int]:
        return self._worker(name).call(lambda cid: Tokenize(cid, text))

    def detokenize(self, name: str, sequences: list[list[int]]) -> list[str]:
        """Each sequence of token ids as the model's text (ids out of its vocabulary are a
        clear error)."""
        return self._worker(name).call(
            lambda cid: Detokenize(cid, tuple(tuple(s) for s in sequences)))

    def count_prompt_tokens(self, name: str, request: GenerationRequest,
                            backend: str | None = None) -> int:
        """How many tokens the request's prompt is for the local model `name` (loading it if
        need be): its chat template rendered with the request's tools and thinking setting,
        tokenized by the model. A generation of the same request reports the same
        `prompt_tokens`, unless it had to drop old turns to fit the context."""
        request.validate()
        if self.is_remote(name):
            raise InvalidRequestError(f"{name} is a remote model: its server renders and "
                                      "tokenizes its prompts, and Ember cannot count them "
                                      "for it (counting runs on local models only)")
        return self._worker(name, backend).call(lambda cid: CountPromptTokens(cid, request))

    def embed(self, name: str, texts: list[str]) -> tuple[list[list[float]], int]:
        """L2-normalised embeddings of `texts`, and the number of tokens read."""
        if not texts:
            raise InvalidRequestError("no input to embed")
        self._check_embeddings(name)
        return self._worker(name).call(lambda cid: Embed(cid, tuple(texts)))

    def _check_embeddings(self, name: str) -> None:
        """A clear error before loading anything when the backend that runs `name` has no
        embeddings (the mlx and cuda backends)."""
        if self.is_remote(name):
            return  # _worker says remote models embed on their own server
        model = self._installed(name)
        with self._lock:
            worker = self._workers.get(model.ref)
        if worker is not None and worker.alive:
            backend, caps = worker.backend, worker.capabilities
        else:
            backend = self.choose(model).name
            caps = capabilities(backend)
        if not caps.embeddings:
            raise InvalidRequestError(f"{model.ref} runs on the {backend} backend, and this "
                                      "backend has no embeddings (the llamacpp backend "
                                      "has)")

    def keep_alive(self, name: str, seconds: float | None) -> None:
        """How long this model stays loaded after its last request (None: the default;
        a negative value: forever; 0: unload as soon as it is idle)."""
        if self.is_remote(name):
            return  # the remote server decides what it keeps loaded
        model = self._installed(name)
        with self._lock:
            worker = self._workers.get(model.ref)
        if worker is not None:
            worker.keep_alive_s = seconds

    def unload_idle(self) -> list[str]:
        """Unload models idle past their keep-alive; returns their refs."""
        now = time.monotonic()
        gone = []
        with self._lock:
            for ref, w in list(self._workers.items()):
                ttl = w.keep_alive_s if w.keep_alive_s is not None else self.idle_ttl_s
                if ttl is None or ttl < 0 or w.busy:
                    continue
                if now - w.last_used >= ttl or not w.alive:
                    gone.append((ref, self._workers.pop(ref)))
                    if not w.alive:
                        log.info("removed %s: its worker (pid %s) is gone", ref, w.pid)
                    else:
                        log.info("unloading %s: idle for %.0f s (keep-alive %g s)", ref,
                                 now - w.last_used, ttl)
        for _, w in gone:
            w.stop()
        return [ref for ref, _ in gone]

    def unload(self, name: str) -> bool:
        if self.is_remote(name):
            return False
        model = self._installed(name)
        with self._lock:
            worker = self._workers.pop(model.ref, None)
        if worker is None:
            return False
        log.info("unloading %s (worker pid %s): asked to", model.ref, worker.pid)
        worker.stop()
        return True

    def shutdown(self) -> None:
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        if workers:
            log.info("shutting down: unloading %s", ", ".join(w.model.ref for w in workers))
        for w in workers:
            w.stop()
        self.remotes.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def prompt_too_long(tokens: int, max_tokens: int | None, context: int, limit: str,
                    advice: str) -> InvalidRequestError:
    """The 400 of a prompt that does not fit `context` with room for its answer."""
    room = answer_room(context, max_tokens)
    return InvalidRequestError(
        f"the prompt is {tokens} tokens, and with room for the answer ({room} tokens) it needs "
        f"a context of {tokens + room}; {limit} is {context} tokens: shorten the prompt (drop "
        f"old turns or long tool output), ask for fewer max_tokens, or {advice}")


def _changes(worker: Worker, backend: str, context: int | None, gpu_layers: int | None,
             quant: str | None) -> str:
    """What a load asks for that the loaded worker does not have, for the log."""
    asked = {"backend": backend, "context": context, "GPU layers": gpu_layers, "quant": quant}
    had = {"backend": worker.backend, "context": worker.plan.context,
           "GPU layers": worker.plan.gpu_layers, "quant": worker.plan.quant}
    return ", ".join(f"{k} {had[k]} -> {v}" for k, v in asked.items()
                     if v != had[k] and (v is not None or k == "quant"))


__all__ = ["Generation", "LoadedModel", "Runtime", "Serving"]
