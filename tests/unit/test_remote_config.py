"""Remote endpoints in config.toml (app/endpoints.py): a broken file or an endpoint without a
url is a clear error and the file is never overwritten, an endpoint is replaced by name, and
NAME/model resolves to both. (`ember remote` as a user runs it:
tests/integration/test_remote_config_cli.py.)"""

from __future__ import annotations

import pytest

from app.config import Paths
from app.errors import ConfigError, ModelNotFoundError
from app.runtime import endpoints


def test_a_broken_config_toml_is_reported_and_never_overwritten(tmp_path):
    paths = Paths(tmp_path)
    paths.config_file.write_text("[remotes\nurl = ")
    with pytest.raises(ConfigError, match="not valid TOML"):
        endpoints.add("lab", "http://h:8000", paths=paths)
    assert paths.config_file.read_text() == "[remotes\nurl = "


def test_add_replaces_an_endpoint_and_resolve_splits_name_and_model(tmp_path):
    paths = Paths(tmp_path)
    endpoints.add("lab", "http://a:1/v1", "k1", paths=paths)
    endpoints.add("lab", "http://b:2/v1", paths=paths)
    endpoint, model = endpoints.resolve("lab/meta-llama/Llama-3.1-8B-Instruct", paths)
    assert (endpoint.url, endpoint.api_key) == ("http://b:2/v1", None)
    assert model == "meta-llama/Llama-3.1-8B-Instruct"  # the model part keeps its slashes
    with pytest.raises(ModelNotFoundError, match="did you mean lab"):
        endpoints.resolve("labb/x", paths)


def test_an_endpoint_without_a_url_in_config_toml_is_a_config_error(tmp_path):
    paths = Paths(tmp_path)
    paths.config_file.write_text('[remotes.lab]\napi_key = "k"\n')
    with pytest.raises(ConfigError, match=r"\[remotes.lab\]: needs url"):
        endpoints.endpoints(paths)
