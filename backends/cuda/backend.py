"""The cuda backend for the Runtime: requests in, events out, over our own engine.

Chat templates, fitting a conversation into the context, stop strings and UTF-8-safe
streaming work as in the llama.cpp backend (same helpers), so both backends answer a
request the same way. Without a GPU the engine runs on the CPU in float32 and says so.
Speculative decoding (speculative.py) runs per request, batched with everything else; one
draft model is loaded at a time, on the first request that names it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from backends.base import (
    Admission,
    CancelFlag,
    Capabilities,
    ErrorEvent,
    Event,
    FinishReason,
    GenerationRequest,
    LoadPlan,
    Message,
    ModelFiles,
    PromptTooLong,
    SpeculativeParams,
    check_token_ids,
    refuse_media,
)
from backends.chat_format.base import OutputParser
from backends.chat_format.render import ChatTemplate
from backends.cuda.engine import Engine, EngineConfig
from backends.cuda.loader import load_weights
from backends.cuda.models import build_model
from backends.cuda.sequence import Sequence
from backends.cuda.tokenizer import Tokenizer, load_tokenizer
from backends.errors import BackendError, InvalidRequestError
from backends.grammar import Constraint, GrammarVocab, request_constraint
from backends.job import BaseJob
from backends.logprobs import log_softmax_at, token_logprob
from backends.prompt import admit, chat_prompt, count_prompt, run_alone
from backends.speculation.vocab import check_draft_vocabulary
from backends.text import TextStream

# what a request with images or audio is told (backends.base.refuse_media)
TEXT_ONLY = ("the cuda backend ("
             "Ember's own engine) reads text onl)")


def pick_device() -> tuple[torch.device, torch.dtype]:
    """bf16 on an NVIDIA GPU; float32 on the CPU (bf16 matmuls are slow on most CPUs)."""
    if torch.cuda.is_available():
        return torch.device("cuda"), torch.bfloat16
    return torch.device("cpu"), torch.float32


@dataclass
class Job(BaseJob):
    """A request (backends.job.BaseJob) and the engine's sequence that decodes it."""
    seq: Sequence


class CudaBackend:
    name = "cuda"
    tokenizes_while_stepping = False

    def __init__(self, max_seqs: int | None = None, adaptive_speculation: bool = True) -> None:
        self.engine: Engine | None = None
        self.tokenizer: Tokenizer | None = None
        self.device, self.dtype = torch.device("cpu"), torch.float32
        self._max_seqs = max_seqs
        self._adaptive = adaptive_speculation  # False: always max_draft (tests, benchmarks)
        self._context = 0
        self._jobs: dict[int, Job] = {}  # by id(sequence)
        self.chat = ChatTemplate(None)
        self._markers: dict[int, bytes] = {}  # the format's marker tokens, shown as text
        self._vocab_size = 0  # the model's logits width
        self._grammar_vocab: GrammarVocab | None = None  # built on the first grammar

    def capabilities(self) -> Capabilities:
        return Capabilities(formats=("gguf", "safetensors"), batching=True, speculative=True,
                            grammar=True, logprobs=True)

    def load(self, model: ModelFiles, plan: LoadPlan) -> None:
        self.load_path(model.path, plan)

    def load_path(self, path: Path, plan: LoadPlan) -> None:
        self.device, self.dtype = pick_device()
        dtype = self.dtype
        if self.device.type == "cpu":
            print("ember: no NVIDIA GPU found; the cuda backend runs on the CPU in float32 "
                  "(correct but slow: the llamacpp backend is faster here)", file=sys.stderr)
            torch.set_num_threads(max(1, plan.threads))
        self.tokenizer = load_tokenizer(path)
        self.chat = ChatTemplate(self.tokenizer.chat_template, self.tokenizer.bos_text,
                                 self.tokenizer.eos_text, Path(path).name)
        self._markers = self.chat.use_marker_tokens(self.tokenizer.tokenize)
        weights = load_weights(path, dtype, self.device, plan.quant)
        model = build_model(weights.config)
        model.load_weights(weights.tensors)
        model.eval()
        self._context = min(plan.context, weights.config.max_position)
        self._vocab_size = weights.config.vocab_size
        self._grammar_vocab = None
        config = EngineConfig(context=self._context,
                              max_seqs=self._max_seqs or max(1, plan.parallel),
                              max_tokens=max(plan.batch, 64),
                              adaptive_speculation=self._adaptive)
        self.engine = Engine(model, config, self.device, dtype, self.tokenizer.is_eog)

    def unload(self) -> None:
        if self.tokenizer is not None:
            self.tokenizer.close()
        if self.engine is not None:
            self.engine.use_draft(None)
        self.engine = self.tokenizer = None
        self._grammar_vocab = None
        self._jobs.clear()

    def _loaded(self) -> tuple[Engine, Tokenizer]:
        if self.engine is None or self.tokenizer is None:
            raise BackendError("no model is loaded")
        return self.engine, self.tokenizer

    def tokenize(self, text: str) -> list[int]:
        return self._loaded()[1].tokenize(text)

    def detokenize(self, tokens: list[int]) -> str:
        tokenizer = self._loaded()[1]
        check_token_ids(tokens, tokenizer.vocab_size())
        return tokenizer.decode(tokens)

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        raise InvalidRequestError("the cuda backend does not compute embeddings yet; load the "
                                  "model with the llamacpp backend for /v1/embeddings")

    # -- prompt ----------------------------------------------------------------------------
    def render(self, messages: tuple[Message, ...],
               request: GenerationRequest | None = None) -> str:
        self._loaded()
        return self.chat.render(messages, request or GenerationRequest(messages=messages))

    def prompt_tokens(self, request: GenerationRequest) -> tuple[list[int], bool, OutputParser]:
        """As the llama.cpp backend (backends.prompt)."""
        refuse_media(request, TEXT_ONLY)
        return chat_prompt(request, self._context, self._loaded()[1].encode, self.chat)

    def count_prompt_tokens(self, request: GenerationRequest) -> int:
        """The whole prompt's length, as `prompt_tokens` counts it (backends.prompt)."""
        refuse_media(request, TEXT_ONLY)
        return count_prompt(request, self._loaded()[1].encode, self.chat)

    # -- generation ------------------------------------------------------------------------
    def submit(self, stream_id: str, request: GenerationRequest,
               cancelled: CancelFlag | None = None) -> Admission:
        engine, _ = self._loaded()
        prompt, truncated, output = self.prompt_tokens(request)
        verdict = admit(request, len(prompt), self._context)
        if isinstance(verdict, PromptTooLong):
            return verdict
        grammar = self._constraint(request, prompt)
        if request.speculative is not None and request.speculative.method == "draft":
            self._use_draft(request.speculative)
        budget = self._context - len(prompt)
        max_new = min(request.sampling.max_tokens or budget, budget)
        seq = Sequence(prompt, request.sampling, max_new, speculative=request.speculative,
                       grammar=grammar, logprobs=request.logprobs)
        engine.add(seq)
        self._jobs[id(seq)] = Job(stream_id, request, cancelled, seq, truncated=truncated,
                                  text=TextStream(request.sampling.stop), output=output)
        return verdict

    def _constraint(self, request: GenerationRequest, prompt: list[int]) -> Constraint | None:
        """The request's grammar (backends.grammar), if it has one; the vocabulary is read
        once per loaded model."""
        tok = self._loaded()[1]
        if self._grammar_vocab is None and (request.json_mode or request.json_schema
                                            or request.tools):
            self._grammar_vocab = tok.grammar_vocab(self._vocab_size)
        if self._grammar_vocab is None:
            return None
        tail = b"".join(tok.piece(t) for t in prompt[-8:]).decode("utf-8", "replace")
        return request_constraint(request, self.chat.fmt, self._grammar_vocab, tail)

    def _use_draft(self, spec: SpeculativeParams) -> None:
        """The request's draft model, loaded unless it already is; its vocabulary must be
        the model's (token ids travel between them)."""
        engine, tok = self._loaded()
        if not spec.draft_path:
            raise InvalidRequestError(f"the draft model {spec.draft_model} was not resolved "
                                      "to a file (the Runtime fills in draft_path)")
        path = Path(spec.draft_path)
        current = engine.speculator.draft
        if current is not None and current.path == path:
            return
        if current is not None and any(
                j.seq.speculative is not None and j.seq.speculative.method == "draft"
                for j in self._jobs.values()):
            raise InvalidRequestError(f"the draft model {current.path.name} is in use by "
                                      f"another request; the cuda backend holds one draft "
                                      f"model at a time (asked for {path.name})")
        draft_tok = load_tokenizer(path)
        try:
            check_draft_vocabulary(tok.vocabulary(), draft_tok.vocabulary(), path.name)
        finally:
            draft_tok.close()
        weights = load_weights(path, self.dtype, self.device)
        model = build_model(weights.config)
        model.load_weights(weights.tensors)
        engine.use_draft(model.eval(), path)

    def score(self, tokens: list[int], start: int) -> list[float]:
        """Teacher-forced log-probabilities: log p(tokens[i] | tokens[:i]) for each i from
        `start` on, from one pass over fresh KV blocks (Engine.score), between the steps of
        any other work. What a request's logprobs are checked against."""
        engine, _ = self._loaded()
        if not 0 < start <= len(tokens):
            raise InvalidRequestError(f"cannot score from token {start} of {len(tokens)}")
        if start == len(tokens):
            return []
        logits = engine.score(tokens[:-1])  # row i: the distribution of tokens[i + 1]
        return [float(log_softmax_at(logits[i - 1].cpu().numpy(), np.array([tokens[i]]))[0])
                for i in range(start, len(tokens))]

    def has_work(self) -> bool:
        return self.engine is not None and self.engine.has_work()

    def step(self) -> list[tuple[str, Event]]:
        engine, _ = self._loaded()
        out: list[tuple[str, Event]] = []
        for job in list(self._jobs.values()):
            if job.is_cancelled():
                out += self._finish(job, "cancelled")
        got: dict[int, list[int]] = {}  # a speculating sequence may get several tokens
        for seq, token in engine.step():
            got.setdefault(id(seq), []).append(token)
        for key, tokens in got.items():
            out += self._emit(self._jobs[key], tokens)
        return out

    def _emit(self, job: Job, tokens: list[int]) -> list[tuple[str, Event]]:
        """Stream one step's tokens of a job, in order, until one of them ends it (the
        tokens after that one leave the sequence)."""
        tok, seq = self._loaded()[1], job.seq
        first = len(seq) - len(tokens)
        rows, seq.raw_rows = seq.raw_rows, []
        out: list[tuple[str, Event]] = []
        for i, token in enumerate(tokens):
            if tok.is_eog(token):
                # the end-of-generation token is not part of the answer
                del seq.tokens[first + i:]
                return out + self._finish(job, "stop")
            marker = self._markers.get(token)
            logprob = (token_logprob(rows[i].numpy(), token, seq.logprobs, tok.token_bytes)
                       if seq.logprobs is not None else None)
            out += job.emitted(marker if marker is not None else tok.piece(token), logprob)
            if job.text.stopped or first + i + 1 - seq.num_prompt >= seq.max_new:
                del seq.tokens[first + i + 1:]
                return out + self._finish(job, "stop" if job.text.stopped else "length")
        return out

    def fail_all(self, message: str) -> list[tuple[str, Event]]:
        if self.engine is not None:
            self.engine.finish_all()
        jobs, self._jobs = list(self._jobs.values()), {}
        return [(job.stream_id, ErrorEvent(message)) for job in jobs]

    def _finish(self, job: Job, reason: FinishReason) -> list[tuple[str, Event]]:
        self._loaded()[0].finish(job.seq)
        del self._jobs[id(job.seq)]
        seq = job.seq
        return job.finish(reason, prompt_tokens=seq.num_prompt,
                          completion_tokens=seq.num_output, cached_tokens=seq.num_cached,
                          draft_tokens=seq.num_drafted, accepted_tokens=seq.num_accepted)

    def generate(self, request: GenerationRequest,
                 cancelled: CancelFlag | None = None) -> Iterator[Event]:
        self._loaded()
        return run_alone(self, request, cancelled)
