"""A tiny audio model written in a test's folder: a random-weights Qwen2 language model and an
audio projector (mmproj) in the layout llama.cpp's mtmd library reads from a real Qwen2-Audio
download, so a test loads them through the same code path as a user's model.

The projector is `qwen2a` (the simplest of mtmd's audio types): a Whisper encoder (two 1-D
convolutions over the log-mel spectrogram, pre-norm transformer blocks with biased Q and V and
an unbiased K, a final layer norm), a 2x average pool and one linear layer to the LM's width.
Names and keys are the ones llama.cpp reads (vendor/llama.cpp in the llama-cpp-python sdist):
`tools/mtmd/clip.cpp` (load_hparams, load_tensors), `clip-impl.h` (KEY_*, TN_*),
`models/whisper-enc.cpp`, and the metadata `conversion/ultravox.py` (WhisperEncoderModel, which
converts Qwen2-Audio) writes. Only the sizes are small.

mtmd's Whisper preprocessing pads every clip with 30 s of silence and encodes 3000-frame
(30 s) windows; the convolution halves them and the pool halves again, so any clip up to 30 s
costs 750 tokens, wrapped in `<|audio_bos|>` ... `<|audio_eos|>` (Qwen2-Audio's tokens, put
in the places the Qwen2 vocabulary pads, the ids Qwen2-Audio gives them)."""

from __future__ import annotations

import io
import wave
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from tests.support.llama_sdist import template
from tests.support.tiny_vision import (
    CONTROL,
    LM_EMBD,
    QWEN_VL_FIRST_SPECIAL,
    _add_tokenizer,
    _Array,
    _lm_hparams,
    _lm_tensors,
    _normal,
    _ones,
    _vocab_kv,
    _Writer,
    _zeros,
)

A_EMBD, A_HEADS, A_FF, A_BLOCKS = 32, 2, 48, 2  # A_FF != A_EMBD, as in tiny_vision
N_MEL = 128  # Qwen2-Audio's (Whisper large-v3's) mel bins
MAX_POSITIONS = 1500  # Whisper's: a 3000-frame window after the stride-2 convolution
CLIP_TOKENS = MAX_POSITIONS // 2  # after the 2x average pool: what any clip up to 30 s costs
SAMPLE_RATE = 16000  # mtmd resamples every clip to this for Whisper encoders

# Qwen2-Audio's added tokens, in its vocabulary's order from 151646
QWEN_AUDIO_SPECIALS = ("<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>")


@dataclass(frozen=True)
class TinyAudioModel:
    model: Path  # the LM GGUF
    projector: Path  # mmproj GGUF
    family: str  # "qwen2a"
    sample_rate: int  # the rate mtmd resamples a clip to
    clip_tokens: int  # tokens one clip up to 30 s costs (mtmd's count)


def write_tiny_qwen2_audio(folder: Path, seed: int = 0) -> TinyAudioModel:
    """Qwen2-Audio: a `qwen2` LM (biased Q/K/V, tied output) and a `qwen2a` projector."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    model, projector = folder / "tiny-qwen2-audio.gguf", folder / "mmproj-tiny-qwen2-audio.gguf"
    _write_qwen2_lm(model, rng)
    _write_qwen2a_projector(projector, rng)
    return TinyAudioModel(model, projector, "qwen2a", SAMPLE_RATE, CLIP_TOKENS)


def _write_qwen2_lm(path: Path, rng: np.random.Generator) -> None:
    kv = _vocab_kv("qwen2")
    tokens = list(kv["tokenizer.ggml.tokens"][1])
    types = np.frombuffer(kv["tokenizer.ggml.token_type"][1].data, dtype=np.int32).copy()
    for i, name in enumerate(QWEN_AUDIO_SPECIALS, QWEN_VL_FIRST_SPECIAL):
        tokens[i], types[i] = name.encode(), CONTROL
    kv["tokenizer.ggml.tokens"] = (gguf.GGUFValueType.ARRAY, tokens)
    kv["tokenizer.ggml.token_type"] = (gguf.GGUFValueType.ARRAY,
                                       _Array(gguf.GGUFValueType.INT32, types.tobytes()))
    w = _Writer(path, "qwen2", "Tiny Qwen2-Audio (random weights)")
    _lm_hparams(w, "qwen2", rope_base=1_000_000.0)
    _add_tokenizer(w, kv, template("Qwen-Qwen2.5-7B-Instruct"))
    w.write(_lm_tensors(rng, len(tokens), qkv_bias=True))


def _write_qwen2a_projector(path: Path, rng: np.random.Generator) -> None:
    w = _Writer(path, "clip", "Tiny Qwen2-Audio projector (random weights)")
    w.add_uint32("general.file_type", int(gguf.LlamaFileType.ALL_F32))
    w.add_bool("clip.has_vision_encoder", False)
    w.add_bool("clip.has_audio_encoder", True)
    w.add_string("clip.projector_type", "qwen2a")
    w.add_uint32("clip.audio.projection_dim", LM_EMBD)
    w.add_uint32("clip.audio.embedding_length", A_EMBD)
    w.add_uint32("clip.audio.feed_forward_length", A_FF)
    w.add_uint32("clip.audio.block_count", A_BLOCKS)
    w.add_uint32("clip.audio.attention.head_count", A_HEADS)
    w.add_float32("clip.audio.attention.layer_norm_epsilon", 1e-5)
    w.add_uint32("clip.audio.num_mel_bins", N_MEL)
    # numpy shapes are ggml's reversed, so torch's: Conv1d weights (out, in, kernel) in F16
    # (the converter forces it; ggml's im2col takes the kernel's type), biases (out, 1)
    t = {"a.conv1d.1.weight": _normal(rng, A_EMBD, N_MEL, 3).astype(np.float16),
         "a.conv1d.1.bias": _normal(rng, A_EMBD, 1),
         "a.conv1d.2.weight": _normal(rng, A_EMBD, A_EMBD, 3).astype(np.float16),
         "a.conv1d.2.bias": _normal(rng, A_EMBD, 1),
         "a.position_embd.weight": _normal(rng, MAX_POSITIONS, A_EMBD),
         "a.post_ln.weight": _ones(A_EMBD), "a.post_ln.bias": _zeros(A_EMBD),
         "mm.a.fc.weight": _normal(rng, LM_EMBD, A_EMBD), "mm.a.fc.bias": _normal(rng, LM_EMBD)}
    for i in range(A_BLOCKS):
        p = f"a.blk.{i}."
        t[p + "ln1.weight"], t[p + "ln1.bias"] = _ones(A_EMBD), _zeros(A_EMBD)
        t[p + "ln2.weight"], t[p + "ln2.bias"] = _ones(A_EMBD), _zeros(A_EMBD)
        for m in ("attn_q", "attn_k", "attn_v", "attn_out"):
            t[p + m + ".weight"] = _normal(rng, A_EMBD, A_EMBD)
            if m != "attn_k":  # Whisper's key projection has no bias (whisper-enc.cpp asserts)
                t[p + m + ".bias"] = _normal(rng, A_EMBD)
        t[p + "ffn_up.weight"] = _normal(rng, A_FF, A_EMBD)
        t[p + "ffn_up.bias"] = _normal(rng, A_FF)
        t[p + "ffn_down.weight"] = _normal(rng, A_EMBD, A_FF)
        t[p + "ffn_down.bias"] = _normal(rng, A_EMBD)
    w.write(t)


def sine_wav(freq: float, seconds: float = 1.0, rate: int = SAMPLE_RATE,
             channels: int = 1) -> bytes:
    """A WAV (16-bit PCM) of a sine at `freq` Hz: another frequency, another clip."""
    n = int(rate * seconds)
    wave_ = np.sin(2 * np.pi * freq * np.arange(n) / rate) * 12000
    frames = np.repeat(wave_.astype("<i2")[:, None], channels, axis=1)
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(frames.tobytes())
    return out.getvalue()
