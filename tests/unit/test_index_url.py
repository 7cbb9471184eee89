"""Which package index the mirror reads: Ember's own setting first, then the user's pip
configuration (environment, then pip's files, read without pip), then PyPI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.config import Paths
from app.errors import ConfigError
from app.pull import index_url as index_url_module
from app.pull.index_url import PYPI, IndexUrl, ca_bundle, index_url, pip_config_files


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user whose home, XDG config folder and site-wide config folder are under tmp_path,
    with no index set anywhere."""
    for name in ("EMBER_PYPI_INDEX", "PIP_INDEX_URL", "PIP_CONFIG_FILE", "PIP_CERT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "etc-xdg"))
    monkeypatch.setattr(index_url_module, "ETC", str(tmp_path / "etc"))
    return tmp_path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def conf(url: str, section: str = "global") -> str:
    return f"[{section}]\nindex-url = {url}\ntimeout = 60\n"


def test_each_setting_wins_over_the_ones_after_it(home: Path, monkeypatch: pytest.MonkeyPatch):
    paths = Paths(home / "ember")
    site = write(home / "etc-xdg" / "pip" / "pip.conf", conf("https://site.example/simple"))
    etc = write(home / "etc" / "pip.conf", conf("https://etc.example/simple"))
    legacy = write(home / "home" / ".pip" / "pip.conf", conf("https://legacy.example/simple"))
    user = write(home / "home" / ".config" / "pip" / "pip.conf",
                 conf("https://user.example/simple"))
    env_file = write(home / "env.conf", conf("https://env-file.example/simple"))
    monkeypatch.setenv("PIP_CONFIG_FILE", str(env_file))
    monkeypatch.setenv("PIP_INDEX_URL", "https://pip-env.example/simple")
    write(paths.config_file, '[pull]\npypi_index = "https://ember-config.example/simple"\n')
    monkeypatch.setenv("EMBER_PYPI_INDEX", "https://ember-env.example/simple")

    seen = []
    for undo in (lambda: monkeypatch.delenv("EMBER_PYPI_INDEX"),
                 lambda: paths.config_file.unlink(),
                 lambda: monkeypatch.delenv("PIP_INDEX_URL"),
                 lambda: monkeypatch.delenv("PIP_CONFIG_FILE"),
                 lambda: user.unlink(),
                 lambda: legacy.unlink(),
                 lambda: etc.unlink(),
                 lambda: site.unlink()):
        seen.append(index_url(paths))
        undo()
    seen.append(index_url(paths))
    assert [(c.url, c.origin) for c in seen] == [
        ("https://ember-env.example/simple/", "EMBER_PYPI_INDEX"),
        ("https://ember-config.example/simple/", "config.toml [pull] pypi_index"),
        ("https://pip-env.example/simple/", "PIP_INDEX_URL"),
        ("https://env-file.example/simple/", str(env_file)),
        ("https://user.example/simple/", str(user)),
        ("https://legacy.example/simple/", str(legacy)),
        ("https://etc.example/simple/", str(etc)),
        ("https://site.example/simple/", str(site)),
        (PYPI, "default"),
    ]


def test_pip_config_file_replaces_the_users_files_but_not_the_site_ones(home: Path,
                                                                        monkeypatch):
    site = home / "etc-xdg" / "pip" / "pip.conf"
    user = home / "home" / ".config" / "pip" / "pip.conf"
    env_file = write(home / "env.conf", "[global]\ntimeout = 5\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(env_file))
    files = pip_config_files()
    assert site in files and env_file == files[-1] and user not in files
    write(user, conf("https://user.example/simple"))
    assert index_url(Paths(home / "ember")).url == PYPI


def test_pip_config_file_devnull_turns_every_file_off(home: Path, monkeypatch):
    write(home / "home" / ".config" / "pip" / "pip.conf", conf("https://user.example/simple"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    assert pip_config_files() == []
    assert index_url(Paths(home / "ember")).url == PYPI


def test_the_download_section_wins_over_global_in_one_file(home: Path):
    user = write(home / "home" / ".config" / "pip" / "pip.conf",
                 conf("https://global.example/simple") + conf("https://dl.example/", "download")
                 + conf("https://install.example/", "install"))
    assert index_url(Paths(home / "ember")) == IndexUrl("https://dl.example/", str(user))


def test_a_broken_pip_conf_or_setting_is_a_clear_error(home: Path):
    paths = Paths(home / "ember")
    user = write(home / "home" / ".config" / "pip" / "pip.conf", "index-url = x\n[global\n")
    with pytest.raises(ConfigError, match=rf"{user}: pip's configuration file cannot be read"):
        index_url(paths)
    user.unlink()
    write(paths.config_file, "[pull]\npypi_index = 3\n")
    with pytest.raises(ConfigError, match=r"config.toml \[pull\] pypi_index = 3: expected the "
                                          r"URL of a package index"):
        index_url(paths)


def test_pips_cert_setting_names_the_ca_bundle_and_a_missing_one_is_an_error(home: Path,
                                                                             monkeypatch):
    assert ca_bundle() is None
    bundle = write(home / "corp-ca.pem", "-----BEGIN CERTIFICATE-----\n")
    write(home / "etc" / "pip.conf", f"[global]\ncert = {bundle}\n")
    assert ca_bundle() == str(bundle)
    monkeypatch.setenv("PIP_CERT", str(home / "gone.pem"))
    with pytest.raises(ConfigError, match=rf"pip's cert = {home}/gone.pem \(from PIP_CERT\) "
                                          "is not a file"):
        ca_bundle()
