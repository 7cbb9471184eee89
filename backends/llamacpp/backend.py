"""GGUF models through llama-cpp-python, CPU first (GPU offload where the build has it).

We use llama-cpp-python's low-level model, context and sampler objects, and do everything
around them ourselves: the chat template (sandboxed, backends.chat_template), fitting the
conversation into the context, several sequences decoded together (engine.BatchEngine),
stop strings and UTF-8-safe streaming (text.TextStream), and stats.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp._internals import LlamaBatch, LlamaContext, LlamaModel, LlamaSampler
from llama_cpp._logger import set_verbose

from backends.base import (
    EMBED_MAX_TOKENS,
    Admission,
    CancelFlag,
    Capabilities,
    Event,
    GenerationRequest,
    LoadPlan,
    Message,
    ModelFiles,
    PromptTooLong,
    check_token_ids,
    request_media,
)
from backends.chat_format.base import OutputParser
from backends.chat_format.render import ChatTemplate
from backends.errors import BackendError, InvalidRequestError, ModelFileError
from backends.grammar import Constraint, GrammarVocab, request_constraint, vocab_from_llama
from backends.llamacpp import ggml_backends
from backends.llamacpp.engine import BatchEngine, Job, reusable
from backends.llamacpp.kv_store import KvStore, StoreKey
from backends.llamacpp.llama_log import llama_errors, load_failure
from backends.llamacpp.speculative import DraftModel, logits_row
from backends.llamacpp.vision import MediaPrompt, Projector, find_projector
from backends.logprobs import log_softmax_at
from backends.media import MEDIA_MARKER, Media
from backends.prompt import admit, chat_prompt, count_prompt, run_alone
from backends.speculation.policy import Speculation
from backends.text import TextStream

ALL_LAYERS = 0x7FFFFFFF  # n_gpu_layers meaning "every layer"
GPU_TYPES = ("gpu", "igpu")  # ggml device types that take offloaded layers
PENALTY_LAST_N = 64  # llama.cpp's default repeat-penalty window
KV_CACHE_TYPES = ("f16", "q8_0")


log = logging.getLogger(__name__)


def context_params(plan: LoadPlan) -> llama_cpp.llama_context_params:
    """llama.cpp's context parameters for a load `plan`."""
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = plan.context * plan.parallel  # each sequence gets `context` cells
    cparams.n_batch = cparams.n_ubatch = plan.batch
    cparams.n_seq_max = plan.parallel
    # A KV stream per sequence, as llama-server's -np: attention reads only the sequence's
    # own cells. In one buffer for all (kv_unified) every row also scans the other
    # conversations' cached cells, masked: 13% slower prefill with 3,000 of them
    # (docs/notes/llamacpp-engine.md). A batch of separate streams is cut at every gap in the
    # sequence ids, a pass over the weights each, so the engine keeps running sequences on
    # consecutive ids (engine.place).
    cparams.kv_unified = False
    cparams.n_threads = cparams.n_threads_batch = plan.threads
    cparams.swa_full = False  # sliding-window layers keep only their window
    # No layers on the GPU: nothing goes there, as the plan counts. Else llama.cpp would
    # still send a large batch's matmuls to a GPU it finds (op offload, with a compute buffer
    # there: 38.9 MiB for the 0.5B on lavapipe), and a CPU load would fail on a GPU with no
    # room left, the case a plan of 0 layers is for (and the step-down's last try).
    cparams.op_offload = plan.gpu_layers != 0
    if plan.kv_cache == "q8_0":
        # llama.cpp runs a quantized V cache only inside flash attention: ask for it rather
        # than leave it to "auto", which would fail the load where it says no.
        cparams.type_k = cparams.type_v = llama_cpp.GGML_TYPE_Q8_0
        cparams.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    return cparams


def kv_store(model: ModelFiles, plan: LoadPlan) -> KvStore | None:
    """The saved KV caches of `model` under `plan`'s settings, if the plan names a folder
    and the model its file's hash (kv_store.py has what a key holds and why)."""
    sha256 = getattr(model, "sha256", None)
    if not plan.kv_store or not sha256:
        return None
    key = StoreKey(model_sha256=sha256, context=plan.context, kv_cache=plan.kv_cache,
                   gpu_layers=plan.gpu_layers, llama_version=llama_cpp.__version__)
    return KvStore(Path(plan.kv_store), key, plan.kv_store_bytes)


def fewer_gpu_layers(n_gpu_layers: int, n_layer: int) -> list[int]:
    """The n_gpu_layers values to try, in order, after a load with `n_gpu_layers` (-1: all)
    failed on the GPU: half the repeating layers each time, then the CPU alone (0). The
    first entry is the one that failed. With n >= 1 llama.cpp puts the output layer and the
    last n - 1 repeating layers on the GPU (app.fit.offload)."""
    first = n_layer + 1 if n_gpu_layers < 0 else min(n_gpu_layers, n_layer + 1)
    steps = [n_gpu_layers]
    repeating = first - 1
    while repeating > 0:
        repeating //= 2
        steps.append(repeating + 1 if repeating else 0)
    if steps[-1] != 0:
        steps.append(0)
    return steps


def _and(reason: str, more: str) -> str:
    return f"{reason}; {more}" if reason else more


def _layers_text(n_gpu_layers: int) -> str:
    if n_gpu_layers < 0:
        return "every layer on the GPU"
    if n_gpu_layers == 0:
        return "on the CPU alone"
    return f"n_gpu_layers={n_gpu_layers} ({n_gpu_layers - 1} layers and the output on the GPU)"


def no_gpu_now(loaded: ggml_backends.Loaded) -> str:
    """Why a plan with GPU layers runs on the CPU: llama.cpp finds no GPU at load."""
    if loaded.gpu_off:
        why = "EMBER_GPU=off"
    elif loaded.failed:
        why = "its GPU backend did not load: " + "; ".join(loaded.failed)
    else:
        why = "no GPU device answers now"
    return f"the plan had GPU layers, but llama.cpp finds no GPU ({why}): the CPU runs it"


class LlamaCppBackend:
    name = "llamacpp"
    # llama.cpp's vocabulary is read-only while a decode runs: llama-server tokenizes in its
    # HTTP threads the same way
    tokenizes_while_stepping = True

    def __init__(self) -> None:
        self._model: LlamaModel | None = None
        self._ctx: LlamaContext | None = None
        self.engine: BatchEngine | None = None
        self._installed: ModelFiles | None = None
        self.chat = ChatTemplate(None)
        self._bos_text = ""
        self._add_bos = False
        self._n_ctx_seq = 0
        self._threads = 1
        self._batch = 512
        # a second context, made on the first embeddings request
        self._embed_ctx: LlamaContext | None = None
        self._embed_batch: LlamaBatch | None = None
        self._parallel = 1
        self._drafts: dict[str, DraftModel] = {}  # draft models by path, loaded on first use
        self._sliding_window = False
        self._embedding_only = False
        self._markers: dict[int, bytes] = {}  # the format's marker tokens, shown as text
        self._grammar_vocab: GrammarVocab | None = None  # built on the first grammar
        self.projector: Projector | None = None  # the model's images and audio, if any
        self._last_media: MediaPrompt | None = None  # prompt_tokens' media, for submit

    def capabilities(self) -> Capabilities:
        return Capabilities(formats=("gguf",), batching=True, speculative=True,
                            embeddings=True, grammar=True, logprobs=True, media=True)

    # -- loading ---------------------------------------------------------------------------
    def load(self, model: ModelFiles, plan: LoadPlan) -> LoadPlan | None:
        if plan.kv_cache not in KV_CACHE_TYPES:
            raise BackendError(f"KV cache type {plan.kv_cache!r}: the llamacpp backend takes "
                               f"{' or '.join(KV_CACHE_TYPES)}")
        set_verbose(False)
        loaded = ggml_backends.load_backends(gpu=True)  # a GPU backend that fails: logged
        llama_cpp.llama_backend_init()
        used = plan
        if plan.gpu_layers != 0 and not any(d.type in GPU_TYPES for d in loaded.devices):
            used = replace(plan, gpu_layers=0, reason=_and(plan.reason, no_gpu_now(loaded)))
            log.warning("%s: %s", model.ref, no_gpu_now(loaded))
        steps = [used.gpu_layers]
        failures: list[str] = []
        while True:
            try:
                with llama_errors() as llama_said:
                    self._model, self._ctx = self._open(model, used, steps[0])
                break
            except (ValueError, RuntimeError) as e:
                self.unload()
                why = load_failure(llama_said, e)
                if steps[0] == 0:
                    raise ModelFileError(f"{model.path}: llama.cpp could not load it ({e})"
                                         + (f" (first on the GPU: {'; '.join(failures)})"
                                            if failures else "")) from e
                if len(steps) == 1:  # the first failure: plan the steps down
                    try:
                        steps = fewer_gpu_layers(steps[0], self._layer_count(model))
                    except (ValueError, RuntimeError):  # not the GPU: the file itself
                        raise ModelFileError(f"{model.path}: llama.cpp could not load it "
                                             f"({e})") from e
                failures.append(f"{_layers_text(steps[0])} failed: {why}")
                log.warning("%s: llama.cpp could not load %s (%s); trying %s",
                            model.ref, _layers_text(steps[0]), why, _layers_text(steps[1]))
                steps = steps[1:]
        if failures:
            used = replace(used, gpu_layers=steps[0], reason=_and(
                used.reason, f"the GPU could not hold the plan ({failures[0]}), so llama.cpp "
                             f"runs {_layers_text(steps[0])}"))
        self._installed = model
        self._n_ctx_seq = used.context
        self._threads = used.threads
        self._batch = used.batch
        self._parallel = used.parallel
        meta = self._model.metadata()
        self._sliding_window = any(k.endswith(".attention.sliding_window") for k in meta)
        # An encoder (BERT and kin) sees the whole text at once: it has no next token to give
        self._embedding_only = meta.get(
            f"{meta.get('general.architecture')}.attention.causal") == "false"
        self._bos_text = _token_text(self._model, self._model.token_bos())
        self.chat = ChatTemplate(meta.get("tokenizer.chat_template") or None, self._bos_text,
                                 _token_text(self._model, self._model.token_eos()), model.ref)
        self._add_bos = meta.get("tokenizer.ggml.add_bos_token", "true") == "true"
        self._markers = self.chat.use_marker_tokens(self.tokenize_special)
        projector_path = find_projector(model)
        if projector_path is not None:
            with llama_errors() as llama_said:
                try:
                    self.projector = Projector(projector_path, self._model.model, used.threads,
                                               use_gpu=used.gpu_layers != 0)
                except ModelFileError as e:
                    self.unload()
                    said = f" (llama.cpp: {llama_said[-1]})" if llama_said else ""
                    raise ModelFileError(f"{e}{said}") from e
        self.engine = BatchEngine(self._ctx, used.parallel, used.context, used.batch,
                                  self._piece, self._is_eog, self._token_bytes,
                                  projector=self.projector)
        self.engine.kv_store = None if self._sliding_window else kv_store(model, used)
        return used if used != plan else None

    def _open(self, model: ModelFiles, plan: LoadPlan,
              gpu_layers: int) -> tuple[LlamaModel, LlamaContext]:
        """The model and its context with `gpu_layers` (llama.cpp's n_gpu_layers, -1: all)."""
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = ALL_LAYERS if gpu_layers < 0 else gpu_layers
        llama_model = LlamaModel(path_model=str(model.path), params=mparams, verbose=False)
        try:
            return llama_model, LlamaContext(
                model=llama_model, params=context_params(replace(plan, gpu_layers=gpu_layers)),
                verbose=False)
        except BaseException:
            llama_model.close()
            raise

    @staticmethod
    def _layer_count(model: ModelFiles) -> int:
        """The model's repeating layers, from its header alone (llama.cpp's vocab-only load
        reads no weights). Its `<arch>.block_count`: a vocab-only model reports n_layer 0,
        which once sent every failed GPU load straight to the CPU."""
        mparams = llama_cpp.llama_model_default_params()
        mparams.vocab_only = True
        header = LlamaModel(path_model=str(model.path), params=mparams, verbose=False)
        try:
            meta = header.metadata()
            count = meta.get(f"{meta.get('general.architecture')}.block_count", "")
            if not count.isdigit():
                raise ValueError(f"{model.path}: its header has no block_count")
            return int(count)
        finally:
            header.close()

    def unload(self) -> None:
        if self.engine is not None:
            try:
                self.engine.save_states()  # conversations that survive a restart
            except Exception:  # a cache not saved must not keep the model loaded
                log.exception("saving the KV caches of %s failed",
                              self._installed.ref if self._installed else "the model")
            self.engine.close()
            self.engine = None
        for draft in self._drafts.values():
            draft.close()
        self._drafts.clear()
        self._grammar_vocab = None  # it tokenizes through the model's vocabulary
        self._last_encoded = None
        if self.projector is not None:
            self.projector.close()
            self.projector = None
        for part in (self._embed_batch, self._embed_ctx, self._ctx, self._model):
            if part is not None:
                part.close()
        self._embed_batch = self._embed_ctx = self._ctx = self._model = None

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        """One L2-normalised vector per text, and the tokens read. An embedding model pools
        as its file says; a generative one gets the mean of its last hidden states (what
        llama-server --embeddings and Ollama do)."""
        model = self._loaded()
        if self._embed_ctx is None or self._embed_batch is None:
            own_pooling = any(k.endswith(".pooling_type") for k in model.metadata())
            cparams = llama_cpp.llama_context_default_params()
            cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = EMBED_MAX_TOKENS
            cparams.n_seq_max = 1
            cparams.n_threads = cparams.n_threads_batch = self._threads
            cparams.embeddings = True
            cparams.pooling_type = (llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED if own_pooling
                                    else llama_cpp.LLAMA_POOLING_TYPE_MEAN)
            self._embed_ctx = LlamaContext(model=model, params=cparams, verbose=False)
            self._embed_batch = LlamaBatch(n_tokens=EMBED_MAX_TOKENS, embd=0, n_seq_max=1,
                                           verbose=False)
        ctx, batch = self._embed_ctx, self._embed_batch
        n_embd = llama_cpp.llama_model_n_embd(model.model)
        vectors, total = [], 0
        for i, text in enumerate(texts):
            tokens = self._encode(text)
            if not text or not tokens:
                raise InvalidRequestError(f"input {i} is empty")
            if len(tokens) > EMBED_MAX_TOKENS:
                raise InvalidRequestError(f"input {i} is {len(tokens)} tokens; Ember embeds at "
                                          f"most {EMBED_MAX_TOKENS} per input")
            total += len(tokens)
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx.ctx), True)
            batch.set_batch(tokens, 0, False)
            ctx.decode(batch)
            vector = llama_cpp.llama_get_embeddings_seq(ctx.ctx, 0)[:n_embd]
            norm = math.sqrt(sum(x * x for x in vector)) or 1.0
            vectors.append([x / norm for x in vector])
        return vectors, total

    def score(self, tokens: list[int], start: int) -> list[float]:
        """Teacher-forced log-probabilities: log p(tokens[i] | tokens[:i]) for each i from
        `start` on, from `forced_rows`."""
        return [float(log_softmax_at(logits, np.array([tokens[i]]))[0])
                for i, logits in self.forced_rows(tokens, start)]

    def forced_rows(self, tokens: list[int], start: int) -> Iterator[tuple[int, np.ndarray]]:
        """(i, the logits before tokens[i]) for each i from `start` on, `tokens` forced through
        the model in a context of its own (the engine's cache is left alone), in the shape
        plain decoding evaluates them: tokens[:start] in batches of up to `batch` rows, then
        one token at a time. llama.cpp's CPU kernels round differently by batch shape: one
        pass over the whole sequence moved a token's log-probability by up to 0.06 on
        Qwen2.5-Coder-0.5B Q4_K_M (docs/notes/llamacpp-engine.md). Each row is a view of
        llama.cpp's buffer, valid until the next one."""
        model = self._loaded()
        if not 0 < start <= len(tokens):
            raise InvalidRequestError(f"cannot score from token {start} of {len(tokens)}")
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = -(-len(tokens) // 256) * 256
        cparams.n_batch = cparams.n_ubatch = self._batch
        cparams.n_seq_max = 1
        cparams.n_threads = cparams.n_threads_batch = self._threads
        ctx = LlamaContext(model=model, params=cparams, verbose=False)
        batch = LlamaBatch(n_tokens=self._batch, embd=0, n_seq_max=1, verbose=False)
        pieces = [(a, min(a + self._batch, start)) for a in range(0, start, self._batch)]
        pieces += [(i, i + 1) for i in range(start, len(tokens) - 1)]
        try:
            for first, end in pieces:
                batch.set_batch(tokens[first:end], first, False)  # logits of the last row
                ctx.decode(batch)
                if end >= start:
                    yield end, logits_row(ctx.ctx, end - 1 - first, model.n_vocab())
        finally:
            batch.close()
            ctx.close()

    def _loaded(self) -> LlamaModel:
        if self._model is None or self.engine is None:
            raise BackendError("no model is loaded")
        return self._model

    def _held(self) -> LlamaModel:
        """The model from the start of `load` to `unload` (the engine exists only then)."""
        if self._model is None:
            raise BackendError("no model is loaded")
        return self._model

    def tokenize(self, text: str) -> list[int]:
        return self._loaded().tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def detokenize(self, tokens: list[int]) -> str:
        model = self._loaded()
        check_token_ids(tokens, model.n_vocab())
        return model.detokenize(tokens, special=True).decode("utf-8", "replace")

    def tokenize_special(self, text: str) -> list[int]:
        return self._held().tokenize(text.encode("utf-8"), add_bos=False, special=True)

    # Called for every token by the engine, which exists only while a model is loaded.
    # Control tokens stay hidden, except the markers the output parser reads.
    def _piece(self, token: int) -> bytes:
        marker = self._markers.get(token)
        return marker if marker is not None else self._held().detokenize([token], special=False)

    def _token_bytes(self, token: int) -> bytes:
        """A token as logprobs show it: control tokens as their text (`<|im_end|>`)."""
        return self._held().detokenize([token], special=True)

    def _is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._held().vocab, token))

    # -- prompt ----------------------------------------------------------------------------
    def render(self, messages: tuple[Message, ...],
               request: GenerationRequest | None = None) -> str:
        return self.chat.render(messages, request or GenerationRequest(messages=messages))

    def _encode(self, text: str) -> list[int]:
        add_bos = self._add_bos and not (self._bos_text and text.startswith(self._bos_text))
        return self._loaded().tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def prompt_tokens(self, request: GenerationRequest) -> tuple[list[int], bool, OutputParser]:
        """The prompt as tokens, whether something was dropped to fit, and the parser of the
        answer (backends.prompt)."""
        if self._embedding_only:
            ref = self._installed.ref if self._installed else "this model"
            raise InvalidRequestError(f"{ref} is an embedding model: it embeds text "
                                      "(/v1/embeddings, /api/embed) and cannot generate any")
        media = self._request_media(request)
        if not media:
            return chat_prompt(request, self._n_ctx_seq, self._encode, self.chat)
        encoded: list[MediaPrompt] = []

        def encode(text: str) -> list[int]:
            for earlier in encoded:  # a longer rendering, before turns were dropped
                earlier.close()
            encoded.clear()
            encoded.append(self._encode_media(text, media))
            return encoded[-1].tokens

        tokens, truncated, parser = chat_prompt(request, self._n_ctx_seq, encode, self.chat)
        self._last_media = encoded[-1]
        return tokens, truncated, parser

    def _request_media(self, request: GenerationRequest) -> tuple[Media, ...]:
        """The request's images and clips, checked against what the model takes."""
        media = request_media(request.messages) + request.media
        if not media:
            return ()
        ref = self._installed.ref if self._installed else "this model"
        if self.projector is None:
            raise InvalidRequestError(f"{ref} reads text only: it has no vision projector "
                                      "(mmproj), so it cannot take images or audio")
        self.projector.check(media, ref)
        return media

    def _encode_media(self, text: str, media: tuple[Media, ...]) -> MediaPrompt:
        """`text` (a rendering of the request, maybe with its oldest turns dropped) with its
        media: those of the turns kept, which are the request's last ones (only a system
        prompt comes before them, and it carries none)."""
        assert self.projector is not None
        kept = media[len(media) - text.count(MEDIA_MARKER):] if MEDIA_MARKER in text else ()
        add_bos = self._add_bos and not (self._bos_text and text.startswith(self._bos_text))
        return self.projector.tokenize(text, kept, add_bos)

    def count_prompt_tokens(self, request: GenerationRequest) -> int:
        """The whole prompt's length, as `prompt_tokens` counts it (backends.prompt), images
        and audio at the tokens they take."""
        self._loaded()
        media = self._request_media(request)
        if not media:
            return count_prompt(request, self._encode, self.chat)
        text = request.prompt if request.prompt is not None else \
            self.chat.render(request.messages or (), request)
        prompt = self._encode_media(text, media)
        prompt.close()
        return len(prompt.tokens)

    def _constraint(self, request: GenerationRequest, prompt: list[int]) -> Constraint | None:
        """The request's grammar (JSON mode, a schema, tool calls), if it has one. The
        vocabulary is read once per loaded model (about a second for 150k tokens)."""
        model = self._loaded()
        if self._grammar_vocab is None and (request.json_mode or request.json_schema
                                            or request.tools):
            self._grammar_vocab = vocab_from_llama(model.vocab, model.n_vocab())
        if self._grammar_vocab is None:
            return None
        tail = model.detokenize([t for t in prompt[-8:] if t >= 0],
                                special=True).decode("utf-8", "replace")
        return request_constraint(request, self.chat.fmt, self._grammar_vocab, tail)

    def _sampler(self, request: GenerationRequest) -> LlamaSampler:
        """The same chain as llama-cpp-python's Llama.generate: penalties, then greedy, or
        top-k, typical (off), top-p, min-p, temperature and a seeded draw. A grammar masks
        the logits row before the chain (BatchEngine._sample), where llama.cpp's own grammar
        sampler would have removed the same tokens inside it."""
        s = request.sampling
        sampler = LlamaSampler()
        sampler.add_penalties(n_vocab=self._loaded().n_vocab(), penalty_last_n=PENALTY_LAST_N,
                              penalty_repeat=s.repeat_penalty, penalty_freq=0.0,
                              penalty_present=0.0)
        if s.temperature == 0.0:
            sampler.add_greedy()
        else:
            sampler.add_top_k(s.top_k)
            sampler.add_typical(1.0, 1)
            sampler.add_top_p(s.top_p, 1)
            sampler.add_min_p(s.min_p, 1)
            sampler.add_temp(s.temperature)
            sampler.add_dist(s.seed if s.seed is not None else random.randrange(2**32))
        return sampler

    # -- generation ------------------------------------------------------------------------
    def submit(self, stream_id: str, request: GenerationRequest,
               cancelled: CancelFlag | None = None) -> Admission:
        """Render and tokenize the request's prompt and queue it in the engine; `step()`
        then yields its events."""
        self._last_media = None
        prompt, truncated, output = self.prompt_tokens(request)
        media, self._last_media = self._last_media, None
        engine = self.engine
        assert engine is not None
        verdict = admit(request, len(prompt), self._n_ctx_seq,
                        max((reusable(s, prompt) for s in engine.slots if s.job is None),
                            default=0))
        if isinstance(verdict, PromptTooLong):
            if media is not None:
                media.close()
            return verdict
        try:
            job = self._job(stream_id, request, cancelled, prompt, truncated, output, media)
        except BaseException:
            if media is not None:
                media.close()
            raise
        engine.submit(job)
        return verdict

    def _job(self, stream_id: str, request: GenerationRequest, cancelled: CancelFlag | None,
             prompt: list[int], truncated: bool, output: OutputParser,
             media: MediaPrompt | None) -> Job:
        budget = self._n_ctx_seq - len(prompt)
        max_new = min(request.sampling.max_tokens or budget, budget)
        grammar = self._constraint(request, prompt)
        spec, draft = self._speculation(request, prompt, media is not None)
        job = Job(stream_id, request, cancelled, prompt, self._sampler(request),
                  max_new, truncated=truncated, text=TextStream(request.sampling.stop),
                  output=output, spec=spec, draft=draft, grammar=grammar,
                  argmax=request.sampling.temperature == 0.0
                  and request.sampling.repeat_penalty == 1.0)
        if media is not None:
            job.spans, job.release = media.spans, media.close
        return job

    def _speculation(self, request: GenerationRequest, prompt: list[int],
                     has_media: bool = False) -> tuple[Speculation | None, DraftModel | None]:
        """The request's speculative state, and its draft model (loaded on first use). With
        images, prompt lookup proposes from the prompt's text only, and a draft model
        (which sees no images) is not used."""
        params = request.speculative
        if params is None:
            return None, None
        if has_media:
            prompt = [t for t in prompt if t >= 0]
            if params.method == "draft":
                if params.by_default:
                    return None, None
                raise InvalidRequestError("speculative decoding with a draft model cannot "
                                          "take images or audio: the draft model reads text "
                                          "only (use method 'lookup', or none)")
        if self._sliding_window:
            if params.by_default:
                return None, None
            raise InvalidRequestError(
                f"{self._installed.ref if self._installed else 'this model'} has sliding-window "
                "attention layers, whose llama.cpp cache cannot take back rejected tokens: "
                "speculative decoding is not available for it")
        if params.method == "lookup":
            return Speculation.start(params, prompt), None
        if not params.draft_path:
            raise InvalidRequestError("speculative decoding with a draft model needs its path "
                                      "(the Runtime fills it in from draft_model)")
        draft = self._drafts.get(params.draft_path)
        if draft is None:
            draft = DraftModel(params.draft_path, self._parallel, self._n_ctx_seq,
                               self._threads, self._loaded())
            self._drafts[params.draft_path] = draft
        return Speculation.start(params, prompt), draft

    def step(self) -> list[tuple[str, Event]]:
        return self.engine.step() if self.engine is not None else []

    def fail_all(self, message: str) -> list[tuple[str, Event]]:
        for draft in self._drafts.values():
            draft.forget_all()
        return self.engine.fail_all(message) if self.engine is not None else []

    def has_work(self) -> bool:
        return self.engine is not None and self.engine.has_work()

    def generate(self, request: GenerationRequest,
                 cancelled: CancelFlag | None = None) -> Iterator[Event]:
        """One request on its own (the other requests of the engine, if any, run too)."""
        self._loaded()
        return run_alone(self, request, cancelled)


def _token_text(model: LlamaModel, token: int) -> str:
    return model.token_get_text(token) if token >= 0 else ""
