"""GGUF models through llama-cpp-python, CPU first (GPU offload where the build has it).

We use `Llama.generate` (the token loop with llama.cpp's sampler chain and the prefix-reusing
KV cache) and do everything around it ourselves: the chat template (sandboxed, app.templates),
fitting the conversation into the context, stop strings, UTF-8-safe streaming, and stats.
"""

from __future__ import annotations

import codecs
import json
import random
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from app.errors import BackendError, InvalidRequestError, ModelFileError
from app.templates import render_chat
from backends.base import (
    CancelFlag,
    Capabilities,
    DoneEvent,
    Event,
    GenerationRequest,
    LoadPlan,
    Message,
    Stats,
    TokenEvent,
)

if TYPE_CHECKING:
    from app.store import InstalledModel


CHUNK = 64  # prompt evaluation chunk; 64 and 512 prefill equally fast here


class LlamaCppBackend:
    name = "llamacpp"

    def __init__(self) -> None:
        self._llm = None
        self._model: InstalledModel | None = None
        self._template: str | None = None
        self._bos_text = ""
        self._eos_text = ""
        self._add_bos = False
        self._exact_upto = 0  # cached tokens that are bit-identical to a fresh evaluation

    def capabilities(self) -> Capabilities:
        return Capabilities(formats=("gguf",))

    # -- loading ---------------------------------------------------------------------------
    def load(self, model: InstalledModel, plan: LoadPlan) -> None:
        import llama_cpp

        try:
            self._llm = llama_cpp.Llama(
                model_path=str(model.path), n_ctx=plan.context, n_batch=plan.batch,
                n_threads=plan.threads, n_threads_batch=plan.threads,
                n_gpu_layers=plan.gpu_layers, swa_full=False, verbose=False)
        except (ValueError, RuntimeError) as e:
            raise ModelFileError(f"{model.path}: llama.cpp could not load it ({e})") from e
        self._model = model
        meta = self._llm.metadata
        self._template = meta.get("tokenizer.chat_template") or None
        self._bos_text = _token_text(self._llm, self._llm.token_bos())
        self._eos_text = _token_text(self._llm, self._llm.token_eos())
        self._add_bos = meta.get("tokenizer.ggml.add_bos_token", "true") == "true"

    def unload(self) -> None:
        if self._llm is not None:
            self._llm.close()
            self._llm = None

    def tokenize(self, text: str) -> list[int]:
        return self._llm_or_fail().tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def _llm_or_fail(self):  # noqa: ANN202 - llama_cpp.Llama is imported lazily
        if self._llm is None:
            raise BackendError("no model is loaded")
        return self._llm

    # -- prompt ----------------------------------------------------------------------------
    def render(self, messages: tuple[Message, ...]) -> str:
        if self._template is None:
            raise InvalidRequestError(
                f"{self._model.ref if self._model else 'this model'} has no chat template "
                "(a base model): send a plain prompt instead of a conversation")
        return render_chat(self._template, [{"role": m.role, "content": m.content}
                                            for m in messages],
                           bos_token=self._bos_text, eos_token=self._eos_text)

    def _encode(self, text: str) -> list[int]:
        add_bos = self._add_bos and not (self._bos_text and text.startswith(self._bos_text))
        return self._llm_or_fail().tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def prompt_tokens(self, request: GenerationRequest) -> tuple[list[int], bool]:
        """The prompt as tokens, and whether something had to be dropped to fit the context.

        A conversation loses its oldest turns after the system prompt, one at a time, until it
        fits with room to answer; the last message is always kept. A raw prompt keeps its end.
        """
        n_ctx = self._llm_or_fail().n_ctx()
        wanted = request.sampling.max_tokens or n_ctx // 4
        limit = n_ctx - max(1, min(wanted, n_ctx // 2))
        if request.prompt is not None:
            tokens = self._encode(request.prompt)
            if len(tokens) <= limit:
                return tokens, False
            return tokens[-limit:], True

        messages = list(request.messages or ())
        truncated = False
        while True:
            tokens = self._encode(self.render(tuple(messages)))
            if len(tokens) <= limit:
                return tokens, truncated
            first = 1 if messages[0].role == "system" else 0
            if len(messages) - first <= 1:
                raise InvalidRequestError(
                    f"the last message alone is {len(tokens)} tokens; with room for the answer "
                    f"the context ({n_ctx} tokens) holds {limit}: shorten it or load the model "
                    "with a larger context")
            del messages[first]
            truncated = True

    @staticmethod
    def _grammar(request: GenerationRequest):  # noqa: ANN205 - llama_cpp.LlamaGrammar
        """JSON mode and JSON schemas become a llama.cpp grammar that constrains sampling."""
        if not request.json_mode:
            return None
        from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar

        try:
            if request.json_schema is not None:
                return LlamaGrammar.from_json_schema(json.dumps(request.json_schema),
                                                     verbose=False)
            return LlamaGrammar.from_string(JSON_GBNF, verbose=False)
        except (ValueError, TypeError, KeyError, RuntimeError) as e:
            raise InvalidRequestError(f"unsupported JSON schema: {e}") from e

    # -- prompt cache ----------------------------------------------------------------------
    def _prefill(self, prompt: list[int]) -> int:
        """Evaluate all but the prompt's last piece, reusing the KV cache where it matches.

        llama.cpp's CPU kernels give slightly different numerics for the same row in batches
        of different shapes (measured: logits differ by up to 0.37 when a cached prefix is
        cut at an arbitrary token). So prompts are always evaluated in chunks whose
        boundaries sit at multiples of CHUNK positions, and the cache is reused only up to
        such a boundary: a cache hit then runs exactly the decode calls a fresh start would,
        and greedy output never depends on what the worker ran before. `Llama.generate`
        evaluates the last piece (1..CHUNK tokens). Returns how many tokens were reused.
        """
        llm = self._llm_or_fail()
        cached = llm.input_ids[: llm.n_tokens]
        common = 0
        for a, b in zip(cached, prompt, strict=False):
            if a != b:
                break
            common += 1
        keep = min(common, len(prompt) - 1, self._exact_upto) // CHUNK * CHUNK
        if keep == 0 or (keep < llm.n_tokens and not llm._ctx.kv_cache_seq_rm(-1, keep, -1)):
            llm.reset()
            keep = 0
        llm.n_tokens = keep
        while llm.n_tokens + CHUNK < len(prompt):
            llm.eval(prompt[llm.n_tokens: llm.n_tokens + CHUNK])
        # Only full prompt chunks are computed as a fresh start would compute them; the last
        # piece and the answer's tokens (decoded one at a time) are not reused later.
        self._exact_upto = llm.n_tokens
        return keep

    # -- generation ------------------------------------------------------------------------
    def generate(self, request: GenerationRequest,
                 cancelled: CancelFlag | None = None) -> Iterator[Event]:
        llm = self._llm_or_fail()
        s = request.sampling
        start = time.perf_counter()
        prompt, truncated = self.prompt_tokens(request)
        llm.set_seed(s.seed if s.seed is not None else random.randrange(2**32))
        reused = self._prefill(prompt)
        budget = llm.n_ctx() - len(prompt)
        max_new = min(s.max_tokens or budget, budget)

        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text = ""  # everything decoded so far
        emitted = 0  # how much of `text` has been sent
        n_out = 0
        first_at = last_at = None
        finish = "length"
        stream = llm.generate(prompt, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p,
                              temp=s.temperature, repeat_penalty=s.repeat_penalty, reset=True,
                              grammar=self._grammar(request))
        try:
            for token in stream:
                if cancelled is not None and cancelled.is_set():
                    finish = "cancelled"
                    break
                if _is_eog(llm, token):
                    finish = "stop"
                    break
                n_out += 1
                last_at = time.perf_counter()
                first_at = first_at or last_at
                text += decoder.decode(llm.detokenize([token]))
                hit = _find_stop(text, s.stop, emitted)
                if hit is not None:
                    text = text[:hit]
                    finish = "stop"
                    break
                safe = len(text) - _held_back(text, s.stop)
                if safe > emitted:
                    yield TokenEvent(text[emitted:safe])
                    emitted = safe
                if n_out >= max_new:
                    finish = "length"
                    break
                if cancelled is not None and cancelled.is_set():
                    finish = "cancelled"
                    break
        finally:
            stream.close()
        if finish != "stop":
            text += decoder.decode(b"", final=True)
        if len(text) > emitted:
            yield TokenEvent(text[emitted:])
        end = time.perf_counter()
        decode_s = (last_at - first_at) if first_at and last_at else 0.0
        yield DoneEvent(Stats(
            prompt_tokens=len(prompt), completion_tokens=n_out,
            ttft_s=round((first_at or end) - start, 4),
            decode_tokens_per_s=round((n_out - 1) / decode_s, 2) if decode_s > 0 else 0.0,
            finish_reason=finish, truncated=truncated,  # type: ignore[arg-type]
            total_s=round(end - start, 4), cached_tokens=reused), text=text)


def _is_eog(llm, token: int) -> bool:  # noqa: ANN001
    import llama_cpp

    return bool(llama_cpp.llama_vocab_is_eog(llm._model.vocab, token))


def _token_text(llm, token: int) -> str:  # noqa: ANN001
    return llm._model.token_get_text(token) if token >= 0 else ""


def _find_stop(text: str, stops: tuple[str, ...], emitted: int) -> int | None:
    """Index of the earliest stop string in `text` (only the unsent tail can hold a new one)."""
    if not stops:
        return None
    window = max(0, emitted - max(len(s) for s in stops))
    hits = [i for s in stops if (i := text.find(s, window)) >= 0]
    return min(hits) if hits else None


def _held_back(text: str, stops: tuple[str, ...]) -> int:
    """How many trailing characters could be the start of a stop string (not sent yet)."""
    longest = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:n]):
                longest = max(longest, n)
                break
    return longest
