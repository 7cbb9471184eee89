"""Presets: a named system prompt with sampling settings, chosen per conversation; and each
model's own load settings (context, GPU layers, KV cache type), used when the window loads it.

Both live in config.toml, beside the app's other settings:

    [presets."Code reviewer"]
    system_prompt = "You review Python code. Be terse."
    temperature = 0.2
    top_p = 0.9
    top_k = 40
    min_p = 0.05
    repeat_penalty = 1.0
    max_tokens = 1024

    [model_load."qwen2.5-coder-1.5b-instruct:Q4_K_M"]
    context = 8192
    gpu_layers = -1   # -1: the load plan's choice
    kv_cache = "q8_0" # "auto": the load plan's choice

Why config.toml and not history.db: these are the user's settings for this machine (a load
setting is about this machine's memory), edited in Settings and readable by hand, while
history.db holds conversations, which export and import carry elsewhere. A conversation keeps
only its preset's name (history.db `conversations.preset`); a preset edited later changes the
chats that use it, one deleted leaves them on the app's settings.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, fields
from typing import Any

import tomlkit

from app.config import Paths, load_config, update_config
from app.errors import ConfigError
from app.fit.base import KV_CACHE_TYPES
from backends.base import SamplingParams
from backends.errors import EmberError

PRESETS = "presets"
MODEL_LOAD = "model_load"
NAME_CHARS = 60
KV_CHOICES = ("auto", *KV_CACHE_TYPES)


@dataclass(frozen=True)
class Preset:
    name: str
    system_prompt: str = ""
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    max_tokens: int = 1024

    def validate(self) -> None:
        if not self.name.strip() or len(self.name) > NAME_CHARS:
            raise ConfigError(f"a preset needs a name of 1 to {NAME_CHARS} characters, got "
                              f"{self.name!r}")
        if not 1 <= self.max_tokens <= 131072:
            raise ConfigError(f"preset {self.name!r}: max_tokens must be between 1 and "
                              f"131072, got {self.max_tokens}")
        try:
            self.sampling().validate()
        except Exception as e:  # InvalidRequestError: said as a setting, not a request
            raise ConfigError(f"preset {self.name!r}: {e}") from e

    def sampling(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                              min_p=self.min_p, repeat_penalty=self.repeat_penalty,
                              max_tokens=self.max_tokens)


@dataclass(frozen=True)
class ModelLoad:
    """One model's load settings; each field's "automatic" value leaves it to the plan."""
    context: int = 0  # 0: the app's setting, else the load plan's
    gpu_layers: int = -1  # -1: the app's setting, else the load plan's
    kv_cache: str = "auto"  # auto | f16 | q8_0

    def validate(self, ref: str = "") -> None:
        where = f"[{MODEL_LOAD}.\"{ref}\"] " if ref else ""
        if self.context and not 256 <= self.context <= 1 << 20:
            raise ConfigError(f"{where}context must be 0 (automatic) or at least 256, got "
                              f"{self.context}")
        if self.gpu_layers < -1:
            raise ConfigError(f"{where}gpu_layers must be -1 (automatic) or more, got "
                              f"{self.gpu_layers}")
        if self.kv_cache not in KV_CHOICES:
            raise ConfigError(f"{where}kv_cache must be one of {', '.join(KV_CHOICES)}, got "
                              f"{self.kv_cache!r}")


def _typed(cls: type, raw: object, where: str, **extra: object) -> Any:
    """`cls` from a TOML table: unknown keys are ignored, a wrong type is an error."""
    if not isinstance(raw, dict):
        raise ConfigError(f"config.toml {where} must be a table")
    values: dict[str, object] = dict(extra)
    for f in fields(cls):
        if f.name not in raw or f.name in extra:
            continue
        value, default = raw[f.name], f.default
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not type(default):
            raise ConfigError(f"config.toml {where} {f.name} = {value!r}: expected "
                              f"{type(default).__name__}")
        values[f.name] = value
    return cls(**values)


def _table(p: Paths | None, name: str) -> dict:
    raw = load_config(p).get(name, {})
    if not isinstance(raw, dict):
        raise ConfigError(f"config.toml: [{name}] must be a table")
    return raw


def presets(p: Paths | None = None) -> dict[str, Preset]:
    """The presets in config.toml, by name, in the file's order."""
    out = {}
    for name, raw in _table(p, PRESETS).items():
        preset = _typed(Preset, raw, f"[{PRESETS}.\"{name}\"]", name=name)
        preset.validate()
        out[name] = preset
    return out


def save_preset(preset: Preset, p: Paths | None = None, replaces: str | None = None) -> None:
    """Add or replace `preset` (renaming the one called `replaces`)."""
    preset.validate()

    def edit(doc: tomlkit.TOMLDocument) -> None:
        table = doc.setdefault(PRESETS, {})
        if replaces and replaces != preset.name and replaces in table:
            del table[replaces]
        values = asdict(preset)
        del values["name"]
        table[preset.name] = values

    update_config(edit, p)


def delete_preset(name: str, p: Paths | None = None) -> None:
    def edit(doc: tomlkit.TOMLDocument) -> None:
        table = doc.get(PRESETS, {})
        if name not in table:
            raise ConfigError(f"no preset {name!r}")
        del table[name]

    update_config(edit, p)


def model_load(ref: str, p: Paths | None = None) -> ModelLoad:
    """The load settings remembered for model `ref` (all automatic when none are)."""
    raw = _table(p, MODEL_LOAD).get(ref)
    if raw is None:
        return ModelLoad()
    settings = _typed(ModelLoad, raw, f"[{MODEL_LOAD}.\"{ref}\"]")
    settings.validate(ref)
    return settings


def load_options(ref: str, app_context: int, app_gpu_layers: int, p: Paths | None = None
                 ) -> tuple[int | None, int | None, str | None]:
    """Context, GPU layers and KV cache type to load local model `ref` with: its own
    remembered settings, else the app's (0 and -1: automatic), else None (the load plan's).
    A broken config.toml gives the app's settings (Settings shows the error)."""
    own = ModelLoad()
    with contextlib.suppress(EmberError):
        own = model_load(ref, p)
    context = own.context or app_context or None
    gpu_layers = own.gpu_layers if own.gpu_layers >= 0 else (
        app_gpu_layers if app_gpu_layers >= 0 else None)
    return context, gpu_layers, None if own.kv_cache == "auto" else own.kv_cache


def save_model_load(ref: str, settings: ModelLoad, p: Paths | None = None) -> None:
    """Remember `settings` for `ref`; all automatic forgets them."""
    settings.validate(ref)

    def edit(doc: tomlkit.TOMLDocument) -> None:
        table = doc.setdefault(MODEL_LOAD, {})
        if settings == ModelLoad():
            table.pop(ref, None)
            if not table:
                del doc[MODEL_LOAD]
        else:
            table[ref] = asdict(settings)

    update_config(edit, p)
