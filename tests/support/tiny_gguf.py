"""Small, valid GGUF files written with the `gguf` package, for tests of file handling."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np


def write_tiny_gguf(path: Path, arch: str = "llama", name: str = "Tiny Test Model",
                    extra_floats: int = 0, chat_template: str | None = None,
                    context_length: int = 256) -> Path:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    writer.add_context_length(context_length)
    writer.add_block_count(1)
    writer.add_embedding_length(8)
    writer.add_head_count(2)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tensor("token_embd.weight", np.arange(64, dtype=np.float32).reshape(8, 8))
    if extra_floats:  # bulk, so that a download of the file takes more than one read
        rng = np.random.default_rng(0)
        writer.add_tensor("output.weight", rng.random(extra_floats, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
