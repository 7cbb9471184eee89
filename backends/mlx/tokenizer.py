"""The tokenizer of an MLX model directory: tokenizer.json through `tokenizers`, and the bytes
each token stands for.

We stream bytes per token into the same TextStream as the llama.cpp backend (UTF-8 safe, stop
strings held back), so both backends cut text the same way. mlx-lm's TokenizerWrapper would
load all of transformers for this (seconds of import on a small CPU) and decodes to str.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tokenizers import Tokenizer

from backends.errors import ModelFileError

# End-of-turn markers llama.cpp also treats as end of generation when the vocabulary has them
# as control tokens (its llama-vocab.cpp EOG list); config files often name only one of them.
EOG_TEXTS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|end|>",
             "<end_of_turn>", "<|return|>", "<|eom_id|>")


@cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: printable stand-in character -> byte."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars, n = printable[:], 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


@dataclass
class ModelTokenizer:
    tokenizer: Tokenizer
    pieces: list[bytes]  # token id -> the bytes it decodes to (b"" for special tokens)
    special: frozenset[int]
    eog: frozenset[int]
    bos_text: str
    eos_text: str
    add_bos: bool
    chat_template: str | None

    def tokenize(self, text: str) -> list[int]:
        """Text as tokens, special-token text as those tokens, no BOS."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode(self, text: str) -> list[int]:
        """Special-token text in `text` (from the chat template) becomes those tokens."""
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if self.add_bos and self.bos_text and not text.startswith(self.bos_text):
            bos = self.tokenizer.token_to_id(self.bos_text)
            if bos is not None:
                ids = [bos, *ids]
        return ids


def load_tokenizer(folder: Path, config: dict) -> ModelTokenizer:
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise ModelFileError(f"{folder}: no tokenizer.json (an MLX model directory needs "
                             "config.json, *.safetensors and tokenizer.json)")
    try:
        tokenizer = Tokenizer.from_file(str(path))
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, Exception) as e:  # tokenizers raises plain Exception
        raise ModelFileError(f"{path}: not a readable tokenizer ({e})") from e
    tok_config = _read_json(folder / "tokenizer_config.json")
    template = tok_config.get("chat_template")
    if (folder / "chat_template.jinja").is_file():  # newer repos keep it in its own file
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    if isinstance(template, list):  # several named templates: the default one
        template = next((t["template"] for t in template if t.get("name") == "default"), None)

    added = {a["id"]: a for a in spec.get("added_tokens", [])}
    special = frozenset(i for i, a in added.items() if a.get("special"))
    pieces = _pieces(tokenizer, spec, special)
    bos_text, eos_text = _token_text(tok_config.get("bos_token")), _token_text(
        tok_config.get("eos_token"))

    eog = set(_ids(config.get("eos_token_id")))
    eog |= set(_ids(_read_json(folder / "generation_config.json").get("eos_token_id")))
    for text in (eos_text, *EOG_TEXTS):
        i = tokenizer.token_to_id(text) if text else None
        if i is not None and (i in special or text == eos_text):
            eog.add(i)
    if not eog:
        raise ModelFileError(f"{folder}: no end-of-sequence token in config.json or the "
                             "tokenizer files")
    return ModelTokenizer(tokenizer, pieces, special, frozenset(eog), bos_text, eos_text,
                          bool(tok_config.get("add_bos_token", False)), template or None)


def _pieces(tokenizer: Tokenizer, spec: dict, special: frozenset[int]) -> list[bytes]:
    """Bytes per token id. Byte-level BPE (GPT-2, Qwen, Llama 3) spells bytes with a printable
    alphabet; sentencepiece vocabularies write a space as U+2581 and raw bytes as <0xNN>."""
    byte_level = "ByteLevel" in json.dumps(spec.get("decoder"))
    decoder = _byte_decoder()
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    pieces = [b""] * size
    for token, i in tokenizer.get_vocab(with_added_tokens=True).items():
        if i in special or i >= size:
            continue
        if byte_level and all(c in decoder for c in token):
            pieces[i] = bytes(decoder[c] for c in token)
        elif not byte_level and len(token) == 6 and token.startswith("<0x") and token[-1] == ">":
            pieces[i] = bytes([int(token[3:5], 16)])
        else:
            pieces[i] = token.replace("\u2581", " ").encode("utf-8")
    return pieces


def _token_text(value: object) -> str:
    if isinstance(value, dict):  # {"content": "<s>", ...} in older tokenizer configs
        value = value.get("content")
    return value if isinstance(value, str) else ""


def _ids(value: object) -> list[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int)]
    return []


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelFileError(f"{path}: not valid JSON ({e})") from e
    return data if isinstance(data, dict) else {}
