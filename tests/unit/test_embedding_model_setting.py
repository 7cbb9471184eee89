"""Which embedding model documents use: `[documents] embedding_model` in config.toml, or
all-MiniLM-L6-v2; and the registry's per-model prefixes."""

from __future__ import annotations

import pytest

from app.config import Paths
from app.documents.embedder import DEFAULT_EMBEDDING_MODEL, embedding_model_setting
from app.errors import ConfigError
from app.registry import load_registry


def test_without_a_setting_documents_use_minilm(isolated_home: Paths):
    assert embedding_model_setting(isolated_home) == DEFAULT_EMBEDDING_MODEL == "all-minilm-l6-v2"
    assert load_registry().get(DEFAULT_EMBEDDING_MODEL).embedding


def test_the_users_setting_wins(isolated_home: Paths):
    isolated_home.home.mkdir(parents=True)
    isolated_home.config_file.write_text(
        '[documents]\nembedding_model = " nomic-embed-text-v1.5 "\n')
    assert embedding_model_setting() == "nomic-embed-text-v1.5"  # EMBER_HOME from the fixture


@pytest.mark.parametrize("value", ["3", '""', "[\"a\"]"])
def test_a_setting_that_is_not_a_model_name_is_a_clear_error(isolated_home: Paths, value: str):
    isolated_home.home.mkdir(parents=True)
    isolated_home.config_file.write_text(f"[documents]\nembedding_model = {value}\n")
    with pytest.raises(ConfigError, match="documents.embedding_model must be a model name"):
        embedding_model_setting(isolated_home)


def test_prefixes_come_from_the_registry():
    nomic = load_registry().get("nomic-embed-text-v1.5")
    assert (nomic.query_prefix, nomic.document_prefix) == ("search_query: ", "search_document: ")
    minilm = load_registry().get("all-minilm-l6-v2")
    assert (minilm.query_prefix, minilm.document_prefix) == ("", "")
    assert not minilm.chat and minilm.arch.type == "bert"
