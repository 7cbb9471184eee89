"""Time to search the Hub and fit every quantization of a 20-file GGUF repo, against the local
server speaking the Hub's protocol (tests/support/hub_server.py). Prints JSON.

    .venv/bin/python benchmarks/hub_search_fit.py [--files 20] [--vocab 151936]

Each file has a header the size of a real one (Qwen2.5's vocabulary of 151,936 tokens and
151,387 merges, 290 tensor entries: about 5 MB) and small tensors, since only headers are
read: the point is the time to search, list, read 20 headers by Range requests and fit them,
and how many bytes that takes (`bytes_served`, against `header_bytes_each`: a real file of the
repo would be 0.4-2 GB, all but the header never requested). Target: < 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script
import gguf
import numpy as np

from app.hardware import detect
from app.pull.hf_fit import fit_repo, recommended
from app.pull.hf_repo import list_quants
from app.pull.hf_search import search
from tests.support.hub_server import start_hub

QUANTS = ["IQ2_XXS", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_0", "Q4_K_S", "Q4_K_M",
          "IQ4_XS", "IQ4_NL", "Q5_0", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0", "UD-Q2_K_XL",
          "UD-Q4_K_XL", "BF16", "F16", "F32"]
REPO = "bench/Qwen2.5-0.5B-Instruct-GGUF"


def realistic_gguf(path: Path, vocab: int) -> bytes:
    """A qwen2 GGUF whose header is as big as a real one (vocabulary, merges, token types,
    24 layers of tensor entries), with tiny tensors."""
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_name("Qwen2.5 0.5B Instruct")
    w.add_context_length(32768)
    w.add_block_count(24)
    w.add_embedding_length(896)
    w.add_feed_forward_length(4864)
    w.add_head_count(14)
    w.add_head_count_kv(2)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"token{i:06d}" for i in range(vocab)])
    w.add_token_types([1] * vocab)
    w.add_token_merges([f"tok{i} en{i}" for i in range(vocab - 549)])
    w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}" * 40)
    tiny = np.zeros(32, dtype=np.float32)
    w.add_tensor("token_embd.weight", tiny)
    for layer in range(24):
        for name in ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                     "ffn_up.weight", "ffn_down.weight", "ffn_gate.weight", "attn_norm.weight",
                     "ffn_norm.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias"):
            w.add_tensor(f"blk.{layer}.{name}", tiny)
    w.add_tensor("output_norm.weight", tiny)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--vocab", type=int, default=151936)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = realistic_gguf(Path(tmp) / "m.gguf", args.vocab)
    hub, server = start_hub()
    os.environ["HF_ENDPOINT"] = hub.url
    os.environ.pop("HF_TOKEN", None)
    hub.repo(REPO, tags=("gguf", "text-generation"), library_name="gguf",
             license="apache-2.0", downloads=12345)
    for i in range(30):
        hub.repo(f"other/model-{i}-GGUF", tags=("gguf",), downloads=i)
    quants = QUANTS[:args.files]
    for q in quants:
        hub.add(REPO, f"Qwen2.5-0.5B-Instruct-{q}.gguf", data)
    hw = detect(measure=False)
    try:
        started = time.perf_counter()
        found = search("qwen2.5-0.5b", fmt="gguf")
        searched = time.perf_counter()
        listing = list_quants(found[0].id)
        listed = time.perf_counter()
        fits = fit_repo(listing, hw)
        fitted = time.perf_counter()
        best = recommended(fits, hw)
    finally:
        server.shutdown()
    errors = [f.error for f in fits if f.error]
    total_s = fitted - started
    print(json.dumps({
        "files": len(fits), "header_bytes_each": fits[0].header_bytes if fits else 0,
        "file_bytes_each": len(data), "errors": errors,
        "search_s": round(searched - started, 3), "list_s": round(listed - searched, 3),
        "fit_s": round(fitted - listed, 3), "total_s": round(total_s, 3),
        "target_s": 3.0, "within_target": total_s < 3.0,
        "requests": sum(f.requests for f in fits),
        "bytes_served": hub.served_bytes(), "recommended": best.quant.name if best else None,
        "cpu": hw.cpu, "cores": hw.physical_cores}, indent=2))


if __name__ == "__main__":
    main()
