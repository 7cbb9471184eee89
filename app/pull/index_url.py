"""Which package index the PyPI mirror source reads, and why.

The first that is set wins:
1. `EMBER_PYPI_INDEX` (environment)
2. `pypi_index` in the `[pull]` table of Ember's config.toml
3. `PIP_INDEX_URL` (environment), as pip reads it
4. `index-url` in pip's configuration files, read directly (pip is not there in a bundle), in
   pip's own order, a later file winning over an earlier one: the site-wide files
   (`/etc/xdg/pip/pip.conf`, `/etc/pip.conf`; macOS `/Library/Application Support/pip/pip.conf`;
   Windows `C:\\ProgramData\\pip\\pip.ini`), then the user's (`~/.pip/pip.conf`, then
   `~/.config/pip/pip.conf`; macOS `~/Library/Application Support/pip/pip.conf` when that folder
   exists; Windows `%APPDATA%\\pip\\pip.ini`), then the virtual environment's
   (`<sys.prefix>/pip.conf`; not in a bundle), then the one `PIP_CONFIG_FILE` names (which, when
   it exists, replaces the user's; `os.devnull` turns every file off). In each file the
   `[global]` section, then `[download]` (pip's section for `pip download`, which the mirror
   used to run).
5. PyPI: https://pypi.org/simple/

Proxies come from the environment (HTTPS_PROXY, NO_PROXY; httpx reads them). The CA
certificates are pip's `cert` (PIP_CERT, or `cert` in the same files and sections) when it is
set, else SSL_CERT_FILE / SSL_CERT_DIR, else certifi's. An index URL may carry
`user:password@`. pip's other settings (extra-index-url, find-links, trusted-host) are not
read: the mirror packages live on one index.
"""

from __future__ import annotations

import configparser
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from app import resources
from app.config import Paths, load_config
from app.errors import ConfigError

PYPI = "https://pypi.org/simple/"
ENV = "EMBER_PYPI_INDEX"
CONFIG_TABLE, CONFIG_KEY = "pull", "pypi_index"
ETC = "/etc"  # pip reads <ETC>/pip.conf after the XDG site folders on Linux and BSD


@dataclass(frozen=True)
class IndexUrl:
    url: str  # always ends with "/"
    origin: str  # where it came from, for messages: "EMBER_PYPI_INDEX", a file, "default"


def _pip_config_name() -> str:
    return "pip.ini" if sys.platform == "win32" else "pip.conf"


def pip_config_files() -> list[Path]:
    """pip's configuration files in the order pip reads them (a later one wins)."""
    name = _pip_config_name()
    env_file = os.environ.get("PIP_CONFIG_FILE")
    if env_file == os.devnull:
        return []
    if sys.platform == "darwin":
        site = platformdirs.site_data_dir("pip", appauthor=False, multipath=True).split(os.pathsep)
        user_dir = Path(platformdirs.user_data_dir("pip", appauthor=False))
        if not user_dir.is_dir():
            user_dir = Path("~/.config/pip").expanduser()
    elif sys.platform == "win32":
        site = [platformdirs.site_config_dir("pip", appauthor=False)]
        user_dir = Path(platformdirs.user_config_dir("pip", appauthor=False, roaming=True))
    else:
        site = platformdirs.site_config_dir("pip", appauthor=False,
                                            multipath=True).split(os.pathsep) + [ETC]
        user_dir = Path(platformdirs.user_config_dir("pip", appauthor=False))
    files = [Path(d) / name for d in site]
    if not (env_file and Path(env_file).exists()):
        legacy = Path("~").expanduser() / ("pip" if sys.platform == "win32" else ".pip") / name
        files += [legacy, user_dir / name]
    if not resources.frozen():  # the virtual environment's own; a bundle has none
        files.append(Path(sys.prefix) / name)
    if env_file:
        files.append(Path(env_file))
    return files


def _from_pip_file(path: Path, key: str) -> str | None:
    parser = configparser.RawConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError) as e:  # pip stops on a broken file too
        raise ConfigError(f"{path}: pip's configuration file cannot be read ({e}); fix it, "
                          f"or set {ENV} to the package index to use") from e
    found = None
    for section in ("global", "download"):
        for spelling in (key, key.replace("-", "_")):  # pip accepts both
            if parser.has_option(section, spelling):
                found = parser.get(section, spelling).strip() or found
    return found


def pip_setting(key: str) -> tuple[str, str] | None:
    """pip's value for `key` ("index-url", "cert") and where it came from: its environment
    variable (PIP_INDEX_URL, PIP_CERT), else the last of its files that sets it."""
    env = "PIP_" + key.upper().replace("-", "_")
    if value := os.environ.get(env, "").strip():
        return value, env
    chosen = None
    for path in pip_config_files():
        if path.is_file() and (value := _from_pip_file(path, key)):
            chosen = value, str(path)
    return chosen


def _normalized(url: str) -> str:
    return url.rstrip("/") + "/"


def index_url(paths: Paths | None = None) -> IndexUrl:
    """The index the mirror packages are read from (the module docstring has the order)."""
    if value := os.environ.get(ENV, "").strip():
        return IndexUrl(_normalized(value), ENV)
    table = load_config(paths).get(CONFIG_TABLE, {})
    value = table.get(CONFIG_KEY) if isinstance(table, dict) else None
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"config.toml [{CONFIG_TABLE}] {CONFIG_KEY} = {value!r}: expected the "
                          "URL of a package index (a string)")
    if value and value.strip():
        return IndexUrl(_normalized(value.strip()), f"config.toml [{CONFIG_TABLE}] {CONFIG_KEY}")
    if found := pip_setting("index-url"):
        return IndexUrl(_normalized(found[0]), found[1])
    return IndexUrl(PYPI, "default")


def ca_bundle() -> str | None:
    """The CA certificates pip is told to trust (PIP_CERT, or `cert` in its files): a proxy
    that inspects TLS signs with its own CA, which pip users name there. None: httpx's
    default (SSL_CERT_FILE / SSL_CERT_DIR if set, else certifi's bundle)."""
    found = pip_setting("cert")
    if found is None:
        return None
    if not Path(found[0]).expanduser().is_file():
        raise ConfigError(f"pip's cert = {found[0]} (from {found[1]}) is not a file")
    return str(Path(found[0]).expanduser())
