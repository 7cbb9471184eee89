"""Chat templates (from GGUF metadata or a tokenizer config) rendered in a Jinja2 sandbox.

A model file is untrusted input: llama-cpp-python once rendered GGUF templates in a plain Jinja
environment, and a crafted file could run code (CVE-2024-34359). We render in Jinja2's
ImmutableSandboxedEnvironment and refuse, before rendering, templates that reach for Python
internals (dunder attributes), so the user gets a clear error instead of a silent empty string.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from functools import lru_cache

import jinja2
import jinja2.ext
from jinja2.exceptions import SecurityError
from jinja2.exceptions import TemplateError as JinjaTemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from backends.errors import TemplateError

_DUNDER = re.compile(r"__\w+__|\[\s*['\"]__")


def _raise_exception(message: str) -> None:
    raise TemplateError(f"chat template refused the conversation: {message}")


def _tojson(value: object, indent: int | None = None, ensure_ascii: bool = False,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    """Hugging Face's `tojson` (GLM's and StepFun's templates pass ensure_ascii=False)."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


@lru_cache(maxsize=16)
def compile_template(source: str) -> jinja2.Template:
    match = _DUNDER.search(source)
    if match:
        raise TemplateError("chat template refused: it tries to reach Python internals "
                            f"({match.group(0)!r}), which a chat template never needs")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except JinjaTemplateError as e:
        raise TemplateError(f"chat template does not compile: {e}") from e


def render_chat(source: str, messages: list[dict], *, bos_token: str = "", eos_token: str = "",
                add_generation_prompt: bool = True, tools: list[dict] | None = None,
                **variables: object) -> str:
    """`variables`: what else the template reads (enable_thinking, reasoning_effort)."""
    template = compile_template(source)
    try:
        return template.render(messages=messages, bos_token=bos_token, eos_token=eos_token,
                               add_generation_prompt=add_generation_prompt, tools=tools,
                               **variables)
    except SecurityError as e:
        raise TemplateError(f"chat template refused by the sandbox: {e}") from e
    except TemplateError:
        raise
    except (JinjaTemplateError, TypeError, ValueError) as e:
        raise TemplateError(f"chat template failed to render: {e}") from e
