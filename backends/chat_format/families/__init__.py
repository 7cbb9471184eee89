"""The registry of model families (one module each), and which one a chat template is.

A template is the family whose rule its text matches (never the model's name: fine-tunes
and GGUF re-uploads keep their family's template under any name). Detection never guesses:
- exactly one family matches: that family;
- none matches and the template never reads `tools`: the "generic" format, in which Ember
  describes the tools in the system prompt itself (Gemma 3, Phi-3.5, R1-Distill);
- none matches though the template reads `tools`, or two match: "unknown". Plain chat
  works; a request with tools is refused (backends.chat_format.render), never answered
  with the call left in the text.
"""

from __future__ import annotations

import re
from types import ModuleType

from backends.chat_format.families import (
    apertus,
    apriel,
    cohere_action,
    deepseek_dsml,
    deepseek_r1,
    deepseek_v3,
    functionary_v3_1,
    gemma4,
    generic,
    gigachat,
    glm,
    granite,
    harmony,
    hermes,
    kimi_k2,
    kimi_k3,
    lfm2,
    llama3,
    llama4,
    minicpm5,
    minimax_m2,
    minimax_m3,
    mistral_args,
    mistral_list,
    nemotron_v2,
    phi4,
    qwen3_coder,
    seed_oss,
)
from backends.chat_format.families.base import THINK, Family

MODULES: tuple[ModuleType, ...] = (
    hermes, llama3, mistral_list, phi4, harmony,
    nemotron_v2, granite, llama4, lfm2, cohere_action, functionary_v3_1, apertus,
    gigachat, minicpm5, apriel,
    mistral_args, deepseek_v3, deepseek_r1, kimi_k2, gemma4, kimi_k3,
    qwen3_coder, seed_oss, glm, minimax_m2, minimax_m3, deepseek_dsml,
)
FAMILIES: tuple[Family, ...] = tuple(m.FAMILY for m in MODULES)
GENERIC: Family = generic.FAMILY
UNKNOWN = Family(name="unknown", matches=lambda template: False, native_tools=False)
NONE = Family(name="none", matches=lambda template: False, native_tools=False)
BY_NAME: dict[str, Family] = {f.name: f for f in (*FAMILIES, GENERIC, UNKNOWN, NONE)}
READS_TOOLS = re.compile(r"\btools\b")


def matching_families(template: str) -> list[Family]:
    return [f for f in FAMILIES if f.matches(template)]


def family_of(template: str | None) -> Family:
    if not template:
        return NONE
    found = matching_families(template)
    if len(found) == 1:
        return found[0]
    if not found and READS_TOOLS.search(template) is None:
        return GENERIC
    return UNKNOWN


def by_name(name: str) -> Family:
    return BY_NAME.get(name, UNKNOWN)


__all__ = ["FAMILIES", "THINK", "Family", "by_name", "family_of", "matching_families"]
