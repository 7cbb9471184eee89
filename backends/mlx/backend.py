"""MLX models (Apple Silicon's native format; mlx[cpu] on Linux) through mlx-lm.

mlx-lm loads the model directory and runs it (`load_model`, its model zoo, BatchGenerator,
its KV caches and prompt-cache LRU). Around it we do what every Ember backend does the same
way: the chat template rendered in backends.chat_template's sandbox (the same renderer as
the llama.cpp backend, so one conversation becomes the same prompt text on both, and a
hostile template meets the same checks), fitting the conversation into the context, stop
strings and stats.

Speculative decoding (`request.speculative`): "draft" loads the draft model's MLX directory
(kept loaded for the next request that names it) and checks that its tokenizer gives every
token the same bytes; "lookup" needs no second model. Such requests run outside the batch
(backends.mlx.engine).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from backends.mlx_blas import use_openblas

OPENBLAS = use_openblas()  # before MLX is imported, so that MLX binds to it (mlx_blas)

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.utils import load_model

from backends.base import (
    Admission,
    CancelFlag,
    Capabilities,
    Event,
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
from backends.errors import BackendError, InvalidRequestError, ModelFileError
from backends.grammar import Constraint, GrammarVocab, request_constraint, vocab_from_pieces
from backends.logprobs import log_softmax_at
from backends.mlx.engine import Job, MlxEngine
from backends.mlx.sampler import make_processors, make_sampler
from backends.mlx.speculative import DraftProposer, LookupProposer, Proposer, prefill
from backends.mlx.tokenizer import ModelTokenizer, load_tokenizer
from backends.mlx.unpack import unpack_weights
from backends.mlx_dir import kv_bytes_per_token, read_config
from backends.prompt import admit, chat_prompt, count_prompt, run_alone
from backends.speculation.vocab import check_draft_vocabulary
from backends.text import TextStream

CACHE_ENTRIES_PER_SEQUENCE = 4  # conversations whose KV cache is kept, per parallel sequence

# what a request with images or audio is told (backends.base.refuse_media)
TEXT_ONLY = ("the mlx backend reads text only ("
             "mlx-lm has no vision models; mlx-vlm is not part of Ember yet)")


def float32_activations() -> bool:
    """Whether to run the model in float32. On the CPU (mlx[cpu] on Linux) MLX's quantized
    matmul is 14x slower with bf16 scales than with float32 (3.3 s vs 0.23 s for a 4-bit
    151936x896 matrix-vector product: docs/notes/mlx-on-cpu.md), so we cast there; Metal
    keeps bf16/fp16."""
    return mx.default_device().type == mx.cpu


class MlxBackend:
    name = "mlx"
    tokenizes_while_stepping = False

    def __init__(self) -> None:
        self.engine: MlxEngine | None = None
        self.tok: ModelTokenizer | None = None
        self._installed: ModelFiles | None = None
        self._n_ctx = 0
        self._batch = 0
        self._draft: tuple[str, Any] | None = None  # (path, model) of the last draft model
        self.chat = ChatTemplate(None)
        self._vocab_size = 0  # the model's logits width
        self._grammar_vocab: GrammarVocab | None = None  # built on the first grammar
        self._unpack = False  # weights unpacked to float32 (LoadPlan.unpack_weights)

    def capabilities(self) -> Capabilities:
        return Capabilities(formats=("mlx",), batching=True, speculative=True, grammar=True,
                            logprobs=True)

    # -- loading ---------------------------------------------------------------------------
    def load(self, model: ModelFiles, plan: LoadPlan) -> None:
        if model.format != "mlx":
            raise ModelFileError(f"{model.ref} is a {model.format} model; the mlx backend loads "
                                 f"MLX models (`ember convert {model.id} --to mlx` makes one)")
        folder = Path(model.path)
        config = read_config(folder)
        tok = load_tokenizer(folder, config)
        try:
            mlx_model, _ = load_model(folder)
        except (ValueError, KeyError, TypeError, FileNotFoundError, RuntimeError) as e:
            raise ModelFileError(f"{folder}: mlx-lm could not load it ({e})") from e
        if float32_activations():
            mlx_model.set_dtype(mx.float32)  # scales, norms, embeddings; packed weights stay
        self._unpack = bool(plan.unpack_weights and OPENBLAS)
        if self._unpack:
            unpack_weights(mlx_model)
        self.tok, self._installed, self._n_ctx, self._batch = tok, model, plan.context, plan.batch
        self._vocab_size = int(config.get("vocab_size") or len(tok.pieces))
        self._grammar_vocab = None
        self.chat = ChatTemplate(tok.chat_template, tok.bos_text, tok.eos_text, model.ref)
        # logprobs show every token, control tokens as their text (<|im_end|>)
        token_bytes = list(tok.pieces)
        # the format's marker tokens are shown as text (special tokens are b"" pieces)
        pieces = list(tok.pieces)
        for token, text in self.chat.use_marker_tokens(tok.tokenize).items():
            if 0 <= token < len(pieces):
                pieces[token] = text
                token_bytes[token] = text[3:-3]  # without the marking (3 bytes each end)
        for token in tok.special:
            if 0 <= token < len(token_bytes):
                token_bytes[token] = (tok.tokenizer.id_to_token(token) or "").encode("utf-8")
        kv_per_token = kv_bytes_per_token(config, float32_activations())
        self.engine = MlxEngine(
            mlx_model, pieces, tok.eog, parallel=max(1, plan.parallel),
            prefill_step=plan.batch, cache_entries=CACHE_ENTRIES_PER_SEQUENCE * plan.parallel,
            cache_bytes=CACHE_ENTRIES_PER_SEQUENCE * plan.parallel * plan.context * kv_per_token,
            token_bytes=token_bytes)

    def unload(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        self.tok = None
        self._grammar_vocab = None
        self._draft = None
        mx.clear_cache()

    def _tokenizer(self) -> ModelTokenizer:
        if self.tok is None or self.engine is None:
            raise BackendError("no model is loaded")
        return self.tok

    def tokenize(self, text: str) -> list[int]:
        return self._tokenizer().tokenizer.encode(text, add_special_tokens=False).ids

    def detokenize(self, tokens: list[int]) -> str:
        tok = self._tokenizer()
        check_token_ids(tokens, len(tok.pieces))
        return tok.tokenizer.decode(tokens, skip_special_tokens=False)

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        raise InvalidRequestError("this backend has no embeddings: the mlx backend runs "
                                  "generation only; an embedding model (nomic-embed-text) runs "
                                  "on the llamacpp backend")

    # -- prompt ----------------------------------------------------------------------------
    def render(self, messages: tuple[Message, ...],
               request: GenerationRequest | None = None) -> str:
        self._tokenizer()
        return self.chat.render(messages, request or GenerationRequest(messages=messages))

    def prompt_tokens(self, request: GenerationRequest) -> tuple[list[int], bool, OutputParser]:
        """The prompt as tokens, whether something was dropped to fit, and the parser of the
        answer (backends.prompt, the llama.cpp backend's rule)."""
        refuse_media(request, TEXT_ONLY)
        return chat_prompt(request, self._n_ctx, self._tokenizer().encode, self.chat)

    def count_prompt_tokens(self, request: GenerationRequest) -> int:
        """The whole prompt's length, as `prompt_tokens` counts it (backends.prompt)."""
        refuse_media(request, TEXT_ONLY)
        return count_prompt(request, self._tokenizer().encode, self.chat)

    # -- generation ------------------------------------------------------------------------
    def submit(self, stream_id: str, request: GenerationRequest,
               cancelled: CancelFlag | None = None) -> Admission:
        prompt, truncated, output = self.prompt_tokens(request)
        verdict = admit(request, len(prompt), self._n_ctx)
        if isinstance(verdict, PromptTooLong):
            return verdict
        grammar = self._constraint(request, prompt)
        budget = self._n_ctx - len(prompt)
        max_new = min(request.sampling.max_tokens or budget, budget)
        engine = self.engine
        assert engine is not None
        spec = request.speculative
        if spec is not None and spec.by_default:
            # speculative requests run outside BatchGenerator's batch (engine.py): not by
            # default, where concurrent requests would each pay their own forward pass
            spec = None
        engine.submit(Job(stream_id, request, cancelled, prompt, max_new,
                          make_sampler(request.sampling), make_processors(request.sampling),
                          truncated=truncated, text=TextStream(request.sampling.stop),
                          output=output, proposer=self._proposer(spec) if spec else None,
                          max_draft=spec.max_draft if spec else 0, grammar=grammar))
        return verdict

    def _constraint(self, request: GenerationRequest, prompt: list[int]) -> Constraint | None:
        """The request's grammar (backends.grammar), if it has one; the vocabulary is read
        once per loaded model."""
        tok = self._tokenizer()
        if self._grammar_vocab is None and (request.json_mode or request.json_schema
                                            or request.tools):
            special = {i: tok.tokenizer.id_to_token(i) or "" for i in tok.special}
            self._grammar_vocab = vocab_from_pieces(
                tok.pieces, special, tok.eog,
                lambda text: tok.tokenizer.encode(text, add_special_tokens=False).ids,
                self._vocab_size)
        if self._grammar_vocab is None:
            return None
        tail = tok.tokenizer.decode(prompt[-8:], skip_special_tokens=False)
        return request_constraint(request, self.chat.fmt, self._grammar_vocab, tail)

    # -- speculative decoding --------------------------------------------------------------
    def _proposer(self, spec: SpeculativeParams) -> Proposer:
        if spec.method == "lookup":
            return LookupProposer()
        if not spec.draft_path:
            raise InvalidRequestError("speculative decoding with a draft model needs the "
                                      "draft's path (the Runtime fills it from draft_model)")
        return DraftProposer(self._draft_model(Path(spec.draft_path)), self._batch)

    def _draft_model(self, folder: Path) -> Any:
        if self._draft is not None and self._draft[0] == str(folder):
            return self._draft[1]
        self._draft = None
        config = read_config(folder)
        check_draft_vocabulary(self._tokenizer().pieces, load_tokenizer(folder, config).pieces,
                               folder.name)
        try:
            model, _ = load_model(folder)
        except (ValueError, KeyError, TypeError, FileNotFoundError, RuntimeError) as e:
            raise ModelFileError(f"{folder}: mlx-lm could not load the draft model ({e})") \
                from e
        if float32_activations():
            model.set_dtype(mx.float32)
        if self._unpack:  # a draft is a fraction of the target, whose plan unpacked it
            unpack_weights(model)
        self._draft = (str(folder), model)
        return model

    def score(self, tokens: list[int], start: int) -> list[float]:
        """Teacher-forced log-probabilities: log p(tokens[i] | tokens[:i]) for each i from
        `start` on, in a KV cache of its own (the engine's are left alone), evaluated in the
        shape generation evaluates them: tokens[:start - 1] in prefill pieces, then one
        token at a time. What a request's logprobs are checked against."""
        self._tokenizer()
        assert self.engine is not None
        if not 0 < start <= len(tokens):
            raise InvalidRequestError(f"cannot score from token {start} of {len(tokens)}")
        model = self.engine.model
        cache = make_prompt_cache(model)
        prefill(model, cache, tokens[:start - 1], self._batch)
        out: list[float] = []
        for i in range(start, len(tokens)):
            logits = model(mx.array([[tokens[i - 1]]]), cache=cache)[0, -1]
            row = np.array(logits.astype(mx.float32))
            out += log_softmax_at(row, np.array([tokens[i]])).tolist()
        return out

    def step(self) -> list[tuple[str, Event]]:
        return self.engine.step() if self.engine is not None else []

    def fail_all(self, message: str) -> list[tuple[str, Event]]:
        return self.engine.fail_all(message) if self.engine is not None else []

    def has_work(self) -> bool:
        return self.engine is not None and self.engine.has_work()

    def generate(self, request: GenerationRequest,
                 cancelled: CancelFlag | None = None) -> Iterator[Event]:
        """One request on its own (the engine's other requests, if any, run too)."""
        self._tokenizer()
        return run_alone(self, request, cancelled)
