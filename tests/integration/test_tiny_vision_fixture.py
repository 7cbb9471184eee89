"""The tiny vision models of tests/support/tiny_vision.py load and see through llama.cpp's
own multimodal path, driven with llama-cpp-python's low-level bindings as an engine would:
the language model from its file, the projector with mtmd_init_from_file, an RGB bitmap
tokenized into text and image chunks at the default media marker, the image encoded, and the
chunks decoded. What the image is must change what the model says next, and the same image
must give the same logits, so the image reaches the model (and nothing else does)."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import llama_cpp.llama_cpp as llama
import numpy as np
import pytest
from llama_cpp import mtmd_cpp as mtmd

from tests.support.llama_sdist import vendor_models
from tests.support.tiny_vision import (
    QWEN_VL_FIRST_SPECIAL,
    QWEN_VL_SPECIALS,
    TinyVisionModel,
    write_tiny_gemma3_vision,
    write_tiny_qwen2vl_vision,
)

pytestmark = pytest.mark.integration

WRITERS: dict[str, Callable[[Path], TinyVisionModel]] = {
    "gemma3": write_tiny_gemma3_vision, "qwen2vl": write_tiny_qwen2vl_vision}
# mtmd's image delimiters, as single tokens of the fixtures' vocabularies
IMAGE_BEGIN_END = {"gemma3": ("<start_of_image>", "<end_of_image>"),
                   "qwen2vl": ("<|vision_start|>", "<|vision_end|>")}
TURN_END = {"gemma3": "<end_of_turn>", "qwen2vl": "<|im_end|>"}
THREADS = 2


class Vision:
    """A loaded LM, its llama context and its mtmd context."""

    def __init__(self, fixture: TinyVisionModel) -> None:
        self.fixture = fixture
        llama.llama_backend_init()
        params = llama.llama_model_default_params()
        self.model = llama.llama_model_load_from_file(str(fixture.model).encode(), params)
        assert self.model, f"llama.cpp did not load {fixture.model}"
        self.vocab = llama.llama_model_get_vocab(self.model)
        self.n_vocab = llama.llama_vocab_n_tokens(self.vocab)
        self.n_embd = llama.llama_model_n_embd(self.model)
        cparams = llama.llama_context_default_params()
        cparams.n_ctx, cparams.n_batch, cparams.n_ubatch = 1024, 512, 512
        cparams.n_threads = cparams.n_threads_batch = THREADS
        self.ctx = llama.llama_init_from_model(self.model, cparams)
        assert self.ctx
        mparams = mtmd.mtmd_context_params_default()
        mparams.use_gpu = False
        mparams.n_threads = THREADS
        mparams.print_timings = False
        self.mtmd = mtmd.mtmd_init_from_file(str(fixture.projector).encode(), self.model,
                                             mparams)
        assert self.mtmd, f"mtmd did not load {fixture.projector}"

    def close(self) -> None:
        mtmd.mtmd_free(self.mtmd)
        llama.llama_free(self.ctx)
        llama.llama_model_free(self.model)

    def token(self, text: str) -> list[int]:
        buf = (llama.llama_token * 16)()
        n = llama.llama_tokenize(self.vocab, text.encode(), len(text.encode()), buf, 16,
                                 False, True)
        return list(buf[:n])

    def tokenize(self, prompt: str, images: list[np.ndarray]) -> Chunks:
        bitmaps = (mtmd.mtmd_bitmap_p_ctypes * len(images))()
        for i, image in enumerate(images):
            h, w, _ = image.shape
            data = (ctypes.c_uint8 * image.size).from_buffer_copy(image.tobytes())
            bitmaps[i] = mtmd.mtmd_bitmap_init(w, h, data)
        text = mtmd.mtmd_input_text()
        text.text = prompt.encode()
        text.text_len = len(text.text)
        text.add_special = True
        text.parse_special = True
        chunks = Chunks(mtmd.mtmd_input_chunks_init())
        try:
            rc = mtmd.mtmd_tokenize(self.mtmd, chunks.ptr, ctypes.byref(text), bitmaps,
                                    len(images))
        finally:
            for bitmap in bitmaps:
                mtmd.mtmd_bitmap_free(bitmap)
        assert rc == 0, f"mtmd_tokenize returned {rc}"
        return chunks

    def next_logits(self, chunks: Chunks) -> np.ndarray:
        """The logits after the whole prompt, from an empty cache."""
        llama.llama_memory_clear(llama.llama_get_memory(self.ctx), True)
        n_past = llama.llama_pos(0)
        rc = mtmd.mtmd_helper_eval_chunks(self.mtmd, self.ctx, chunks.ptr, 0, 0, 512, True,
                                          ctypes.byref(n_past))
        assert rc == 0, f"mtmd_helper_eval_chunks returned {rc}"
        logits = llama.llama_get_logits_ith(self.ctx, -1)
        return np.ctypeslib.as_array(logits, shape=(self.n_vocab,)).copy()


class Chunks:
    def __init__(self, ptr: mtmd.mtmd_input_chunks_p) -> None:
        self.ptr = ptr

    def __len__(self) -> int:
        return mtmd.mtmd_input_chunks_size(self.ptr)

    def __getitem__(self, i: int) -> mtmd.mtmd_input_chunk_p:
        return mtmd.mtmd_input_chunks_get(self.ptr, i)

    def types(self) -> list[int]:
        return [mtmd.mtmd_input_chunk_get_type(self[i]) for i in range(len(self))]

    def text_tokens(self, i: int) -> list[int]:
        n = ctypes.c_size_t(0)
        tokens = mtmd.mtmd_input_chunk_get_tokens_text(self[i], ctypes.byref(n))
        return [tokens[j] for j in range(n.value)]

    def free(self) -> None:
        mtmd.mtmd_input_chunks_free(self.ptr)


@pytest.fixture(scope="module", params=sorted(WRITERS))
def vision(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vision]:
    fixture = WRITERS[request.param](tmp_path_factory.mktemp(request.param))
    loaded = Vision(fixture)
    yield loaded
    loaded.close()


def image(seed: int, size: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)


def prompt(v: Vision) -> str:
    marker = mtmd.mtmd_default_marker().decode()
    if v.fixture.family == "gemma3":
        return f"<start_of_turn>user\nWhat is in {marker} this picture?<end_of_turn>\n" \
               "<start_of_turn>model\n"
    return f"<|im_start|>user\nWhat is in {marker} this picture?<|im_end|>\n" \
           "<|im_start|>assistant\n"


def test_fixture_is_written_fast_and_small(tmp_path: Path) -> None:
    vendor_models()  # extracted from the sdist once per machine: not the writer's time
    for family, write in WRITERS.items():
        start = time.monotonic()
        fixture = write(tmp_path / family)
        assert time.monotonic() - start < 3
        assert fixture.family == family
        assert fixture.model.stat().st_size + fixture.projector.stat().st_size < 40e6


def test_projector_matches_the_language_model(vision: Vision) -> None:
    assert mtmd.mtmd_support_vision(vision.mtmd)
    assert not mtmd.mtmd_support_audio(vision.mtmd)
    assert vision.n_embd == 64
    # Qwen2.5-VL's decoder places image tokens by M-RoPE, Gemma 3's sees an image at once
    assert mtmd.mtmd_decode_use_mrope(vision.mtmd) is (vision.fixture.family == "qwen2vl")
    assert mtmd.mtmd_decode_use_non_causal(vision.mtmd, None) is \
        (vision.fixture.family == "gemma3")


def test_image_becomes_one_chunk_of_image_tokens_between_its_delimiters(vision: Vision) -> None:
    chunks = vision.tokenize(prompt(vision), [image(1, vision.fixture.image_size)])
    try:
        assert chunks.types() == [mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT,
                                  mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE,
                                  mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT]
        assert mtmd.mtmd_input_chunk_get_n_tokens(chunks[1]) == vision.fixture.image_tokens
        image_tokens = mtmd.mtmd_input_chunk_get_tokens_image(chunks[1])
        side = int(vision.fixture.image_tokens ** 0.5)
        if vision.fixture.family == "qwen2vl":  # a grid, positioned by its longer side
            assert (mtmd.mtmd_image_tokens_get_nx(image_tokens),
                    mtmd.mtmd_image_tokens_get_ny(image_tokens)) == (side, side)
            assert mtmd.mtmd_input_chunk_get_n_pos(chunks[1]) == side
        else:
            assert mtmd.mtmd_input_chunk_get_n_pos(chunks[1]) == vision.fixture.image_tokens
        begin, end = IMAGE_BEGIN_END[vision.fixture.family]
        assert len(vision.token(begin)) == 1 and len(vision.token(end)) == 1
        assert chunks.text_tokens(0)[-1:] == vision.token(begin)
        assert chunks.text_tokens(2)[:1] == vision.token(end)
        if vision.fixture.family == "qwen2vl":  # and the ids are Qwen2.5-VL's own
            for i, name in enumerate(QWEN_VL_SPECIALS, QWEN_VL_FIRST_SPECIAL):
                assert vision.token(name) == [i]
    finally:
        chunks.free()


def test_turn_end_is_one_token_that_ends_generation(vision: Vision) -> None:
    (token,) = vision.token(TURN_END[vision.fixture.family])
    assert llama.llama_vocab_is_eog(vision.vocab, token)


def test_encoded_image_is_finite_and_as_wide_as_the_model(vision: Vision) -> None:
    chunks = vision.tokenize(prompt(vision), [image(2, vision.fixture.image_size)])
    try:
        assert mtmd.mtmd_encode_chunk(vision.mtmd, chunks[1]) == 0
        out = mtmd.mtmd_get_output_embd(vision.mtmd)
        embd = np.ctypeslib.as_array(out, shape=(vision.fixture.image_tokens * vision.n_embd,))
        assert np.isfinite(embd).all()
        assert embd.std() > 0
    finally:
        chunks.free()


def test_logits_follow_the_image(vision: Vision) -> None:
    size = vision.fixture.image_size
    runs = []
    for seed in (3, 3, 4):
        chunks = vision.tokenize(prompt(vision), [image(seed, size)])
        try:
            runs.append(vision.next_logits(chunks))
        finally:
            chunks.free()
    same, again, other = runs
    assert np.isfinite(same).all()
    np.testing.assert_array_equal(same, again)
    assert np.abs(same - other).max() > 1e-4
    # the image, not the text, is what differs: a greedy choice is made on these logits
    assert int(np.argmax(same)) == int(np.argmax(again))


def test_qwen_image_tokens_follow_the_image_shape_and_gemma_resizes_to_its_square(
        vision: Vision) -> None:
    """Qwen2.5-VL reads images at their own resolution (in multiples of 28 pixels): twice as
    wide is twice the tokens. Gemma 3 resizes every image to its square: always the same."""
    size = vision.fixture.image_size
    wide = np.random.default_rng(5).integers(0, 256, (size, 2 * size, 3), dtype=np.uint8)
    chunks = vision.tokenize(prompt(vision), [wide])
    try:
        n = mtmd.mtmd_input_chunk_get_n_tokens(chunks[1])
    finally:
        chunks.free()
    factor = 2 if vision.fixture.family == "qwen2vl" else 1
    assert n == factor * vision.fixture.image_tokens
