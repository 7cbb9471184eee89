"""Images and audio on the llama.cpp backend, through llama.cpp's own multimodal library.

llama.cpp's mtmd (libmtmd, with llama-cpp-python's `mtmd_cpp` bindings) reads the model's
projector file (`mmproj*.gguf`), turns a prompt whose text holds a marker per image into
chunks (text tokens, and each image's or clip's embedding positions, wrapped in the model's
own tokens such as Gemma 3's `<start_of_image>`), encodes a chunk with the vision or audio
tower, and decodes the embeddings into a sequence's KV cache (`mtmd_helper_eval_chunk_single`,
which knows each model's rules: non-causal attention over an image for Gemma 3, M-RoPE's
2-D positions for Qwen2-VL). llama-server serves images the same way.

In the engine a media chunk is a run of pseudo-tokens in the prompt: negative ids (no real
token has one) derived from the image's SHA-256 and the place in it, so two requests about
the same screenshot share that run and the prefix cache reuses its KV like any text, while
another image differs from its first position. `MediaSpan` keeps the chunk to decode when the
prefill reaches it; the engine decodes it on its own (an embeddings batch cannot share a
llama_decode with token rows) and the text around it batches as usual. A model whose
image positions advance by fewer than its tokens (M-RoPE: `n_pos` < `n_tokens`) moves the
KV positions of what follows: the engine keeps that shift per sequence (engine.Slot).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.errors import BackendError, InvalidRequestError, ModelFileError
from backends.media import MEDIA_MARKER, Media

log = logging.getLogger(__name__)


def mtmd() -> Any:
    """llama-cpp-python's mtmd bindings, or a BackendError saying the build lacks them."""
    try:
        from llama_cpp import mtmd_cpp
    except (ImportError, OSError, FileNotFoundError, RuntimeError) as e:
        raise BackendError("this llama.cpp build has no multimodal library (libmtmd): "
                           f"images and audio cannot be read ({e}); rebuild with "
                           "bash packaging/setup.sh") from e
    return mtmd_cpp


def pseudo_tokens(digest: str, count: int) -> list[int]:
    """The ids a media chunk's positions take in the engine's token lists: negative, and
    distinct for another image (by its SHA-256 `digest`) from the first position."""
    base = int(digest[:15], 16)  # 60 bits
    return [-(1 + ((base + i) % (1 << 62))) for i in range(count)]


@dataclass(eq=False)
class MediaSpan:
    """One image's or clip's chunk in a prompt: tokens[start:end] are its pseudo-tokens,
    and the KV positions it takes are `n_pos` (fewer than its tokens under M-RoPE)."""
    start: int
    end: int
    n_pos: int
    kind: str
    chunk: Any  # an owned copy of mtmd's input chunk (freed by MediaPrompt.close)

    @property
    def n_tokens(self) -> int:
        return self.end - self.start


@dataclass(eq=False)
class MediaPrompt:
    """A prompt's tokens (media as pseudo-tokens) and its media chunks, in order."""
    tokens: list[int]
    spans: tuple[MediaSpan, ...]

    @property
    def media_tokens(self) -> int:
        return sum(s.n_tokens for s in self.spans)

    def close(self) -> None:
        lib = mtmd()
        for span in self.spans:
            if span.chunk:
                lib.mtmd_input_chunk_free(span.chunk)
                span.chunk = None


class Projector:
    """A model's projector, loaded beside it: `tokenize` a rendered prompt with its media,
    `decode` one media chunk into a sequence of a llama.cpp context."""

    def __init__(self, path: Path, model: Any, threads: int, use_gpu: bool) -> None:
        lib = mtmd()
        from backends.llamacpp.llama_log import _callback

        lib.mtmd_log_set(_callback, ctypes.c_void_p(0))
        lib.mtmd_helper_log_set(_callback, ctypes.c_void_p(0))
        params = lib.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = threads
        params.print_timings = False
        params.warmup = False
        params.media_marker = MEDIA_MARKER.encode()
        self.path = path
        self._lib = lib
        self.ctx = lib.mtmd_init_from_file(str(path).encode(), model, params)
        if not self.ctx:
            raise ModelFileError(f"{path}: llama.cpp could not load this projector (mmproj) "
                                 "for the model: a projector made for another model, or a "
                                 "damaged file")
        self.vision = bool(lib.mtmd_support_vision(self.ctx))
        self.audio = bool(lib.mtmd_support_audio(self.ctx))
        self.mrope = bool(lib.mtmd_decode_use_mrope(self.ctx))

    def close(self) -> None:
        if self.ctx:
            self._lib.mtmd_free(self.ctx)
            self.ctx = None

    def check(self, media: Sequence[Media], model_ref: str) -> None:
        for item in media:
            if item.kind == "image" and not self.vision:
                raise InvalidRequestError(f"{model_ref} hears but does not see: its projector "
                                          "takes audio, not images")
            if item.kind == "audio" and not self.audio:
                raise InvalidRequestError(f"{model_ref} sees but does not hear: its projector "
                                          "takes images, not audio")

    def _bitmap(self, item: Media) -> Any:
        lib = self._lib
        if item.kind == "image":
            if len(item.data) != item.width * item.height * 3:
                raise InvalidRequestError(f"an image's pixels do not match its size "
                                          f"({item.width}x{item.height})")
            pixels = (ctypes.c_uint8 * len(item.data)).from_buffer_copy(item.data)
            bitmap = lib.mtmd_bitmap_init(item.width, item.height, pixels)
        else:
            buf = (ctypes.c_uint8 * len(item.data)).from_buffer_copy(item.data)
            bitmap = lib.mtmd_helper_bitmap_init_from_buf(self.ctx, buf, len(item.data), False)
        if not bitmap:
            raise InvalidRequestError(f"llama.cpp could not read the {item.describe()}")
        lib.mtmd_bitmap_set_id(bitmap, item.digest.encode())
        return bitmap

    def tokenize(self, text: str, media: Sequence[Media], add_special: bool) -> MediaPrompt:
        """`text`'s tokens with each MEDIA_MARKER replaced by its media chunk (`media`, in
        order)."""
        lib = self._lib
        if text.count(MEDIA_MARKER) != len(media):
            raise InvalidRequestError(
                f"the rendered prompt places {text.count(MEDIA_MARKER)} media where the "
                f"request carries {len(media)}: this model's chat template does not pass "
                "each message's content through once")
        bitmaps = [self._bitmap(m) for m in media]
        chunks = lib.mtmd_input_chunks_init()
        try:
            raw = text.encode("utf-8")
            inp = lib.mtmd_input_text(raw, len(raw), add_special, True)
            array = (ctypes.c_void_p * max(1, len(bitmaps)))(*bitmaps)
            status = lib.mtmd_tokenize(self.ctx, chunks, ctypes.byref(inp), array, len(bitmaps))
            if status != 0:
                raise InvalidRequestError(f"llama.cpp could not place the request's media in "
                                          f"the prompt (mtmd_tokenize returned {status})")
            return self._prompt(chunks, media)
        finally:
            lib.mtmd_input_chunks_free(chunks)
            for bitmap in bitmaps:
                lib.mtmd_bitmap_free(bitmap)

    def _prompt(self, chunks: Any, media: Sequence[Media]) -> MediaPrompt:
        lib = self._lib
        tokens: list[int] = []
        spans: list[MediaSpan] = []
        taken = iter(media)
        try:
            for i in range(lib.mtmd_input_chunks_size(chunks)):
                chunk = lib.mtmd_input_chunks_get(chunks, i)
                kind = lib.mtmd_input_chunk_get_type(chunk)
                if kind == lib.MTMD_INPUT_CHUNK_TYPE_TEXT:
                    n = ctypes.c_size_t(0)
                    ptr = lib.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                    tokens += [ptr[j] for j in range(n.value)]
                    continue
                item = next(taken)
                count = lib.mtmd_input_chunk_get_n_tokens(chunk)
                n_pos = lib.mtmd_input_chunk_get_n_pos(chunk)
                start = len(tokens)
                tokens += pseudo_tokens(item.digest, count)
                spans.append(MediaSpan(start, len(tokens), n_pos,
                                       "image" if kind == lib.MTMD_INPUT_CHUNK_TYPE_IMAGE
                                       else "audio", lib.mtmd_input_chunk_copy(chunk)))
        except BaseException:
            MediaPrompt(tokens, tuple(spans)).close()
            raise
        return MediaPrompt(tokens, tuple(spans))

    def decode(self, lctx: Any, span: MediaSpan, pos: int, seq_id: int, n_batch: int) -> int:
        """Encode `span`'s image or clip and decode it into sequence `seq_id` from KV
        position `pos`; the position after it."""
        new_pos = ctypes.c_int32(0)
        status = self._lib.mtmd_helper_eval_chunk_single(
            self.ctx, lctx, span.chunk, pos, seq_id, n_batch, False, ctypes.byref(new_pos))
        if status != 0:
            raise BackendError(f"llama.cpp could not decode an {span.kind} "
                               f"(mtmd status {status})")
        return new_pos.value


def find_projector(model: Any) -> Path | None:
    """The model's projector file: `projector` if the model names one (app.store's
    InstalledModel), else None."""
    path = getattr(model, "projector", None)
    return Path(path) if path else None
