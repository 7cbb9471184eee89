"""The app's settings: the `[app]` table of config.toml, read into a dataclass.

Saving goes through `app.config.update_config`: atomic, and every other table, key and
comment in the file stays as it was.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from app.config import DEFAULT_MODEL, Paths, load_config, update_config
from app.errors import ConfigError
from app.identity import RELEASE_FEED
from app.runtime.backend_table import NAMES as SELECTABLE

SECTION = "app"
THEMES = ("light", "dark")
BACKENDS = ("auto", *SELECTABLE)


@dataclass
class Settings:
    default_model: str = DEFAULT_MODEL
    system_prompt: str = ""  # for new conversations; each conversation keeps its own
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 1024
    context: int = 0  # 0: the load plan's choice
    backend: str = "auto"
    gpu_layers: int = -1  # -1: the load plan's choice (only where llama.cpp can offload)
    speculative: bool = True  # prompt lookup (or draft_model), where the model's backend can
    draft_model: str = ""
    theme: str = "light"
    font_size: int = 11
    update_check: bool = False  # off until the user switches it on (app.update_check)
    update_feed: str = RELEASE_FEED
    # closing the window hides it behind the tray icon and the server keeps serving; Quit in
    # the tray's menu quits (app.gui.tray). Only where the desktop has a tray.
    keep_in_tray: bool = False
    start_at_login: bool = False  # app.autostart writes or removes the login entry

    def validate(self) -> None:
        if not 0.0 <= self.temperature <= 2.0:
            raise ConfigError(f"temperature must be between 0 and 2, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 1 <= self.max_tokens <= 131072:
            raise ConfigError(f"max_tokens must be between 1 and 131072, got {self.max_tokens}")
        if self.context and not 256 <= self.context <= 1 << 20:
            raise ConfigError(f"context must be 0 (automatic) or at least 256, got {self.context}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.theme not in THEMES:
            raise ConfigError(f"theme must be light or dark, got {self.theme!r}")
        if not 7 <= self.font_size <= 32:
            raise ConfigError(f"font_size must be between 7 and 32, got {self.font_size}")
        if not self.update_feed.startswith(("https://", "http://")):
            raise ConfigError(f"update_feed must be an http(s) URL, got {self.update_feed!r}")


def load_settings(p: Paths | None = None) -> Settings:
    """Settings from config.toml; keys it does not know are ignored, wrong types are errors."""
    raw = load_config(p).get(SECTION, {})
    if not isinstance(raw, dict):
        raise ConfigError(f"[{SECTION}] in config.toml must be a table")
    s = Settings()
    for f in fields(Settings):
        if f.name not in raw:
            continue
        value, default = raw[f.name], getattr(s, f.name)
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not type(default):
            raise ConfigError(f"config.toml [{SECTION}] {f.name} = {value!r}: expected "
                              f"{type(default).__name__}")
        setattr(s, f.name, value)
    s.validate()
    return s


def save_settings(s: Settings, p: Paths | None = None) -> None:
    s.validate()

    def edit(doc) -> None:  # a tomlkit document
        doc[SECTION] = asdict(s)

    update_config(edit, p)
