"""Remote endpoints, kept in config.toml, and the `NAME/model` references that point at them.

    [remotes.lab]
    url = "http://10.0.0.5:8000/v1"
    api_key = "..."          # optional
    timeout_s = 120          # optional: seconds without data before a request fails

Local model ids never contain "/" (app.store.slug), so `NAME/model` is never a local model;
the model part may itself hold slashes (`lab/meta-llama/Llama-3.1-8B-Instruct`).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import tomlkit

from app import config
from app.errors import ConfigError, ModelNotFoundError
from app.hub_name import has_hub_prefix
from app.registry import suggest
from backends.remote import READ_TIMEOUT_S, Endpoint, RemoteBackend

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise ConfigError(f"invalid remote name {name!r}: use 1-32 lowercase letters, digits, "
                          "'-' or '_', starting with a letter or digit")
    return name


def check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"invalid remote URL {url!r}: give http(s)://HOST[:PORT][/v1]")
    if parts.query or parts.fragment:
        raise ConfigError(f"invalid remote URL {url!r}: no query or fragment")
    return url.rstrip("/")


def endpoints(paths: config.Paths | None = None) -> dict[str, Endpoint]:
    raw = config.load_config(paths).get("remotes", {})
    if not isinstance(raw, dict):
        raise ConfigError("config.toml: [remotes] must be a table of endpoints")
    found = {}
    for name, entry in raw.items():
        where = f"config.toml [remotes.{name}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
            raise ConfigError(f"{where}: needs url = \"http://HOST:PORT/v1\"")
        key = entry.get("api_key")
        timeout = entry.get("timeout_s", READ_TIMEOUT_S)
        if key is not None and not isinstance(key, str):
            raise ConfigError(f"{where}: api_key must be a string")
        if not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigError(f"{where}: timeout_s must be a positive number of seconds")
        found[name] = Endpoint(name, entry["url"], key or None, float(timeout))
    return found


def add(name: str, url: str, api_key: str | None = None,
        paths: config.Paths | None = None) -> Endpoint:
    """Add or replace endpoint `name`; the rest of config.toml is left as it was."""
    check_name(name)
    url = check_url(url)

    def edit(doc: tomlkit.TOMLDocument) -> None:
        if "remotes" not in doc:
            doc["remotes"] = tomlkit.table(is_super_table=True)
        entry = tomlkit.table()
        entry["url"] = url
        if api_key:
            entry["api_key"] = api_key
        doc["remotes"][name] = entry

    config.update_config(edit, paths)
    return endpoints(paths)[name]


def remove(name: str, paths: config.Paths | None = None) -> Endpoint:
    known = endpoints(paths)
    if name not in known:
        hint = suggest(name, list(known))
        raise ConfigError(f"no remote endpoint {name!r}"
                          + (f"; did you mean {', '.join(hint)}?" if hint else
                             f" (known: {', '.join(known) or 'none'})"))

    def edit(doc: tomlkit.TOMLDocument) -> None:
        del doc["remotes"][name]
        if not doc["remotes"]:
            del doc["remotes"]

    config.update_config(edit, paths)
    return known[name]


def split_ref(ref: str) -> tuple[str, str] | None:
    """`NAME/model` -> (NAME, model); None for a local model reference (a Hugging Face
    repo's name too, hf.co/OWNER/REPO: what was pulled by it is local)."""
    if has_hub_prefix(ref):
        return None
    name, slash, model = ref.partition("/")
    return (name, model) if slash else None


def resolve(ref: str, paths: config.Paths | None = None) -> tuple[Endpoint, str]:
    """The endpoint and remote model id of `NAME/model`, or a clear error."""
    parts = split_ref(ref)
    if parts is None or not parts[1]:
        raise ModelNotFoundError(ref, [], "remote endpoints (use NAME/model)")
    name, model = parts
    known = endpoints(paths)
    if name not in known:
        hint = suggest(name, list(known))
        where = ("remote endpoints; add one with `ember remote add NAME URL`" if not known
                 else "remote endpoints")
        raise ModelNotFoundError(name, hint, where)
    return known[name], model


def model_ids(endpoint: Endpoint) -> list[str]:
    """The ids of the models `endpoint` serves (its /models), or its RemoteError."""
    backend = RemoteBackend(endpoint)
    try:
        return [m.id for m in backend.list_models()]
    finally:
        backend.close()
