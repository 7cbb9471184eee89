"""A system turn inside the conversation (Claude Code 2.1 sends its environment as one,
after the user's turn) reaches the model with every chat template llama.cpp vendors: as a
system turn where the template renders one, folded into a user turn where it refuses or
drops it (gpt-oss, Mistral, Qwen3.5, SmolLM3...)."""

from __future__ import annotations

import os

from backends.base import GenerationRequest, Message
from backends.chat_format.render import fold_later_system_turns
from backends.errors import EmberError
from tests.support.families import chat
from tests.support.llama_sdist import vendor_models

PLAIN = (Message("system", "You are an agent."), Message("user", "Reply pong"))
LATER = (*PLAIN, Message("system", "ENV-MARKER cwd=/work"))


def test_every_template_that_renders_a_chat_shows_a_later_system_turn():
    checked, lost = [], []
    for file in sorted(os.listdir(vendor_models() / "templates")):
        template = chat(file.removesuffix(".jinja"), "<s>", "</s>")
        try:
            template.render(PLAIN, GenerationRequest(messages=PLAIN))
        except EmberError:
            continue  # needs tools, or a tag Jinja lacks: not a plain chat template
        checked.append(file)
        try:
            prompt = template.render(LATER, GenerationRequest(messages=LATER))
        except EmberError as e:
            lost.append(f"{file}: {e}")
            continue
        if "ENV-MARKER" not in prompt or "Reply pong" not in prompt:
            lost.append(f"{file}: the later system turn is not in the prompt")
    assert len(checked) >= 55, checked
    assert not lost, lost


def test_a_later_system_turn_joins_the_user_turn_before_it_so_later_requests_render_the_same():
    first = [{"role": "system", "content": "S"}, {"role": "user", "content": "u"},
             {"role": "system", "content": "env"}]
    later = [*first, {"role": "assistant", "content": "a"}, {"role": "user", "content": "u2"}]
    assert fold_later_system_turns(first) == [{"role": "system", "content": "S"},
                                              {"role": "user", "content": "u\n\nenv"}]
    assert fold_later_system_turns(later)[:2] == fold_later_system_turns(first)
    # after an assistant turn: it opens the next user turn; with none left, a user turn
    assert fold_later_system_turns([{"role": "user", "content": "u"},
                                    {"role": "assistant", "content": "a"},
                                    {"role": "system", "content": "mid"},
                                    {"role": "user", "content": "u2"}])[-1] == {
        "role": "user", "content": "mid\n\nu2"}
    assert fold_later_system_turns([{"role": "system", "content": "S"},
                                    {"role": "system", "content": "S2"}]) == [
        {"role": "system", "content": "S"}, {"role": "user", "content": "S2"}]
