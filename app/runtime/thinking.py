"""What a model's Think control can offer, for the front ends (which import no backend).

A local model's comes from its chat template (backends.chat_format.detect_format: thinking
markers or harmony mean it thinks; `thinking_toggle` that it can be switched off,
`thinking_effort` that it takes an effort). A remote model's template is on its server: Ember
asks Ollama's `/api/show` capabilities (Ollama and Ember's own server answer it) and
llama-server's `/props` template; an upstream that answers neither (vLLM) is known to think
once it has streamed some thinking.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from backends.base import Thinking
from backends.chat_format import ChatFormat, detect_format

LEVELS = ("low", "medium", "high")


@dataclass(frozen=True)
class ThinkingSupport:
    thinks: bool = False  # the model thinks before it answers: a Think control is shown
    can_switch_off: bool = False  # its template takes enable_thinking (Qwen3, SmolLM3)
    effort: bool = False  # its template takes reasoning_effort (gpt-oss)

    @property
    def settings(self) -> tuple[str, ...]:
        """The choices of its Think control, the model's default first (history's
        THINKING_SETTINGS): a model with an effort offers levels instead of a plain "on"."""
        if not self.thinks:
            return ()
        on = ("medium", "low", "high") if self.effort else ("on",)
        return on + (("off",) if self.can_switch_off else ())


def support_of(fmt: ChatFormat) -> ThinkingSupport:
    thinks = fmt.thinking is not None or fmt.harmony
    off = fmt.thinking_toggle or fmt.thinking_budget  # Seed-OSS: a budget of 0
    return ThinkingSupport(thinks, thinks and off, thinks and fmt.thinking_effort)


def thinking_for(setting: str | None) -> Thinking:
    """A conversation's Think setting as the request's Thinking (None: the model's default)."""
    if setting is None:
        return Thinking()
    if setting == "off":
        return Thinking(enabled=False)
    if setting in LEVELS:
        return Thinking(enabled=True, effort=setting)  # type: ignore[arg-type]
    return Thinking(enabled=True)


def template_of(path: Path, fmt: str) -> str | None:
    """An installed model's chat template: a GGUF's metadata, or a model directory's
    chat_template.jinja or tokenizer_config.json."""
    if fmt == "gguf":
        from app.gguf_file import read_gguf

        return read_gguf(path, check_architecture=False).chat_template
    if (path / "chat_template.jinja").is_file():
        return (path / "chat_template.jinja").read_text(encoding="utf-8")
    try:
        config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    template = config.get("chat_template") if isinstance(config, dict) else None
    return template if isinstance(template, str) else None


def local_support(path: Path, fmt: str) -> ThinkingSupport:
    return support_of(detect_format(template_of(path, fmt)))


def remote_support(capabilities: list[str] | None, template: str | None,
                   seen_thinking: bool) -> ThinkingSupport:
    """From what an upstream says of a model: Ollama-style capabilities (a thinking model can
    be told not to think: Ollama's think=false, Ember's enable_thinking) and its Jinja
    template when it shows one (llama-server, Ember), or what its answers showed."""
    fmt = detect_format(template) if template and "{%" in template else ChatFormat()
    from_template = support_of(fmt)
    if from_template.thinks:
        return from_template
    if (capabilities is not None and "thinking" in capabilities) or seen_thinking:
        return ThinkingSupport(thinks=True, can_switch_off=True, effort=fmt.thinking_effort)
    return ThinkingSupport()
