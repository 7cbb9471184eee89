"""Hub repositories for the tests of any-repo search, fit and pull (tests/support/hub_server.py
serves them): GGUF files with a real header (a llama architecture, a vocabulary, tensors of
a chosen quantization) and MLX folders."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np

from tests.support.hub_server import FakeHub

LAYERS, EMBD, HEADS, KV_HEADS, CONTEXT = 2, 64, 4, 2, 8192


# the quantizations the gguf package can write, as (tensor type, file type)
QTYPES = {"Q4_0": (gguf.GGMLQuantizationType.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
          "Q5_0": (gguf.GGMLQuantizationType.Q5_0, gguf.LlamaFileType.MOSTLY_Q5_0),
          "Q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
          "F16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
          "BF16": (gguf.GGMLQuantizationType.BF16, gguf.LlamaFileType.MOSTLY_BF16)}


def model_gguf(path: Path, name: str = "Hub Test Model", vocab: int = 2000,
               weights: int = 64 * 64, quant: str = "F32",
               split: tuple[int, int] | None = None) -> bytes:
    """A small GGUF a loader accepts: llama metadata, `vocab` tokens (the header's bulk, as
    in real files), tensors with `weights` extra values (the file's bulk) in `quant` where the
    gguf package writes it (QTYPES), else F32. `split`: (part, count) writes one part of a
    split GGUF as gguf-split does (metadata in part 1)."""
    qtype, file_type = QTYPES.get(quant, (gguf.GGMLQuantizationType.F32,
                                          gguf.LlamaFileType.ALL_F32))
    writer = gguf.GGUFWriter(str(path), "llama")
    if split is None or split[0] == 1:
        writer.add_name(name)
        writer.add_context_length(CONTEXT)
        writer.add_block_count(LAYERS)
        writer.add_embedding_length(EMBD)
        writer.add_feed_forward_length(EMBD * 2)
        writer.add_head_count(HEADS)
        writer.add_head_count_kv(KV_HEADS)
        writer.add_file_type(file_type)
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list([f"tok{i}" for i in range(vocab)])
        writer.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    else:  # later parts: split keys and tensors only
        writer.kv_data[0].pop("general.architecture", None)
    if split is not None:
        writer.add_uint16("split.no", split[0] - 1)
        writer.add_uint16("split.count", split[1])
    rng = np.random.default_rng(split[0] if split else 0)
    if split is None or split[0] == 1:
        writer.add_tensor("token_embd.weight", rng.random((vocab, EMBD), dtype=np.float32))
    bulk = rng.random((max(1, weights // 256), 256), dtype=np.float32)
    if qtype != gguf.GGMLQuantizationType.F32:
        writer.add_tensor(f"blk.{split[0] if split else 0}.ffn_up.weight",
                          gguf.quants.quantize(bulk, qtype), raw_dtype=qtype)
    else:
        writer.add_tensor(f"blk.{split[0] if split else 0}.ffn_up.weight", bulk)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def projector_gguf(path: Path, image_size: int = 896, patch_size: int = 14, hidden: int = 1152,
                   ffn: int = 4304, layers: int = 27, projector_type: str = "gemma3",
                   weights: int = 64 * 64) -> bytes:
    """A multimodal projector (mmproj) as llama.cpp's converter writes one: architecture
    "clip", the clip.vision.* numbers of its encoder (Gemma 3's SigLIP by default), and a
    tensor of `weights` values; what app.fit.projector reads."""
    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_string("clip.projector_type", projector_type)
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_uint32("clip.vision.image_size", image_size)
    writer.add_uint32("clip.vision.patch_size", patch_size)
    writer.add_uint32("clip.vision.embedding_length", hidden)
    writer.add_uint32("clip.vision.feed_forward_length", ffn)
    writer.add_uint32("clip.vision.block_count", layers)
    if projector_type != "gemma3":
        writer.add_uint32("clip.vision.spatial_merge_size", 2)
    rng = np.random.default_rng(7)
    writer.add_tensor("v.patch_embd.weight",
                      rng.random((max(1, weights // 256), 256), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def add_gguf_repo(hub: FakeHub, tmp: Path, repo: str, quants: list[str],
                  weights: int = 64 * 64, **meta: object) -> dict[str, bytes]:
    """A GGUF repo, one file per quantization name (`NAME-<quant>.gguf`), all of one model
    (the same tensors, in that quantization where the gguf package writes it); returns file
    name -> bytes."""
    hub.repo(repo, tags=("gguf", "text-generation"), library_name="gguf", **meta)
    files = {}
    base = repo.split("/")[1].removesuffix("-GGUF")
    for q in quants:
        name = f"{base}-{q}.gguf"
        files[name] = model_gguf(tmp / name, weights=weights, quant=q)
        hub.add(repo, name, files[name])
    return files


def add_mlx_repo(hub: FakeHub, tmp: Path, repo: str, bits: int = 4, **meta: object) -> None:
    """An MLX folder: config.json (a quantized qwen2), tokenizer files, weights."""
    from safetensors.numpy import save_file

    hub.repo(repo, tags=("mlx", "safetensors", "text-generation"), library_name="mlx", **meta)
    config = {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
              "vocab_size": 1000, "max_position_embeddings": 32768,
              "quantization": {"group_size": 64, "bits": bits}, "tie_word_embeddings": True}
    hub.add(repo, "config.json", json.dumps(config).encode())
    hub.add(repo, "tokenizer.json", json.dumps({"model": {"vocab": {}}}).encode())
    hub.add(repo, "tokenizer_config.json",
            json.dumps({"chat_template": "{{ messages }}"}).encode())
    hub.add(repo, "README.md", b"# an MLX model\n")
    weights = tmp / "model.safetensors"
    save_file({"model.embed_tokens.weight": np.zeros((1000, 64), dtype=np.float16)},
              str(weights))
    hub.add(repo, "model.safetensors", weights.read_bytes())
