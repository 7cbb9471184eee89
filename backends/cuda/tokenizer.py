"""Tokenizers: llama.cpp's own vocabulary for GGUF files (so token ids equal the llama.cpp
backend's exactly: same pre-tokenizer regexes, same special-token handling), and Hugging
Face `tokenizers` for safetensors folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from backends.errors import ModelFileError
from backends.grammar.vocab import GrammarVocab, vocab_from_llama, vocab_from_pieces


class Tokenizer(Protocol):
    bos_text: str
    eos_text: str
    chat_template: str | None

    def encode(self, text: str) -> list[int]: ...  # a prompt: BOS added where the model wants
    def tokenize(self, text: str) -> list[int]: ...  # plain text, special tokens parsed
    def piece(self, token: int) -> bytes: ...
    def token_bytes(self, token: int) -> bytes: ...  # as logprobs show it: control tokens too
    def is_eog(self, token: int) -> bool: ...
    def vocabulary(self) -> list[str]: ...  # every token's text, by id
    def vocab_size(self) -> int: ...
    def decode(self, tokens: list[int]) -> str: ...  # ids as text, control tokens included
    def grammar_vocab(self, n_vocab: int) -> GrammarVocab: ...  # for constrained decoding
    def close(self) -> None: ...  # frees a GGUF vocabulary's llama.cpp model


def load_tokenizer(path: Path) -> Tokenizer:
    return HFTokenizer(path) if Path(path).is_dir() else GGUFTokenizer(path)


class GGUFTokenizer:
    def __init__(self, path: Path) -> None:
        import llama_cpp
        from llama_cpp._internals import LlamaModel
        from llama_cpp._logger import set_verbose

        import backends.llamacpp  # noqa: F401  (loads llama.cpp's CPU backend first)

        set_verbose(False)
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True  # the vocabulary and metadata, no weights
        try:
            self._model = LlamaModel(path_model=str(path), params=params, verbose=False)
        except (ValueError, RuntimeError) as e:
            raise ModelFileError(f"{path}: llama.cpp could not read its vocabulary ({e})") from e
        meta = self._model.metadata()
        self.chat_template = meta.get("tokenizer.chat_template") or None
        self.bos_text = self._text(self._model.token_bos())
        self.eos_text = self._text(self._model.token_eos())
        # the llama.cpp backend's rule, so both backends see the same prompt tokens
        self._add_bos = meta.get("tokenizer.ggml.add_bos_token", "true") == "true"

    def _text(self, token: int) -> str:
        return self._model.token_get_text(token) if token >= 0 else ""

    def encode(self, text: str) -> list[int]:
        add_bos = self._add_bos and not (self.bos_text and text.startswith(self.bos_text))
        return self._model.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def tokenize(self, text: str) -> list[int]:
        return self._model.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def piece(self, token: int) -> bytes:
        return self._model.detokenize([token], special=False)

    def token_bytes(self, token: int) -> bytes:
        if not 0 <= token < self._model.n_vocab():  # a logits column past the vocabulary
            return b""
        return self._model.detokenize([token], special=True)

    def is_eog(self, token: int) -> bool:
        import llama_cpp
        return bool(llama_cpp.llama_vocab_is_eog(self._model.vocab, token))

    def vocabulary(self) -> list[str]:
        return [self._model.token_get_text(i) for i in range(self._model.n_vocab())]

    def vocab_size(self) -> int:
        return self._model.n_vocab()

    def decode(self, tokens: list[int]) -> str:
        return self._model.detokenize(tokens, special=True).decode("utf-8", "replace")

    def grammar_vocab(self, n_vocab: int) -> GrammarVocab:
        """llama.cpp's vocabulary, as the llama.cpp backend builds it (valid until close)."""
        return vocab_from_llama(self._model.vocab, n_vocab)

    def close(self) -> None:
        self._model.close()


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: each printable stand-in back to its byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


class HFTokenizer:
    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as HFTok

        file = Path(path) / "tokenizer.json"
        if not file.is_file():
            raise ModelFileError(f"{path}: no tokenizer.json")
        self._tok = HFTok.from_file(str(file))
        cfg_file = Path(path) / "tokenizer_config.json"
        cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}

        def token_text(v: object) -> str:  # a token as a string, or as an added-token dict
            text = v.get("content", "") if isinstance(v, dict) else v
            return text if isinstance(text, str) else ""

        self.chat_template = cfg.get("chat_template")
        self.bos_text = token_text(cfg.get("bos_token"))
        self.eos_text = token_text(cfg.get("eos_token"))
        self._add_bos = bool(cfg.get("add_bos_token", False)) and bool(self.bos_text)
        bos_id = self._tok.token_to_id(self.bos_text) if self._add_bos else None
        if self._add_bos and bos_id is None:
            raise ModelFileError(f"{path}: its BOS token {self.bos_text!r} is not in "
                                 "tokenizer.json")
        self._bos_id = bos_id or 0
        eos_ids = {self._tok.token_to_id(self.eos_text)} if self.eos_text else set()
        model_cfg = Path(path) / "config.json"
        if model_cfg.is_file():
            ids = json.loads(model_cfg.read_text()).get("eos_token_id")
            eos_ids |= set(ids if isinstance(ids, list) else [ids])
        self._eos = {i for i in eos_ids if i is not None}
        self._bytes = _byte_decoder()
        self._special = {i: t.content for i, t in self._tok.get_added_tokens_decoder().items()
                         if t.special}

    def encode(self, text: str) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        if self._add_bos and not text.startswith(self.bos_text):
            ids = [self._bos_id, *ids]
        return ids

    def tokenize(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def piece(self, token: int) -> bytes:
        text = self._tok.id_to_token(token) or ""
        if text and all(c in self._bytes for c in text):  # byte-level BPE
            return bytes(self._bytes[c] for c in text)
        return self._tok.decode([token], skip_special_tokens=True).encode("utf-8")

    def token_bytes(self, token: int) -> bytes:
        if token in self._special:  # its text (<|im_end|>), which `piece` leaves out
            return self._special[token].encode("utf-8")
        return self.piece(token)

    def is_eog(self, token: int) -> bool:
        return token in self._eos

    def vocabulary(self) -> list[str]:
        by_id = {i: t for t, i in self._tok.get_vocab(with_added_tokens=True).items()}
        return [by_id.get(i, "") for i in range(self._tok.get_vocab_size(with_added_tokens=True))]

    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def decode(self, tokens: list[int]) -> str:
        return self._tok.decode(tokens, skip_special_tokens=False)

    def grammar_vocab(self, n_vocab: int) -> GrammarVocab:
        pieces = [b"" if i in self._special else self.piece(i)
                  for i in range(self._tok.get_vocab_size(with_added_tokens=True))]
        return vocab_from_pieces(pieces, self._special, self._eos, self.tokenize, n_vocab)

    def close(self) -> None:
        pass
