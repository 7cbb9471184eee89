"""Qwen2.5-Coder's own chat template, as its GGUF carries it."""

from app.gguf_file import read_gguf
from backends.chat_template import render_chat


def test_qwen_template_frames_system_user_and_generation_prompt(qwen):
    template = read_gguf(qwen.path).chat_template
    text = render_chat(template, [{"role": "system", "content": "Be terse."},
                                  {"role": "user", "content": "hi"}])
    assert text == ("<|im_start|>system\nBe terse.<|im_end|>\n"
                    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_qwen_template_adds_its_default_system_prompt(qwen):
    template = read_gguf(qwen.path).chat_template
    text = render_chat(template, [{"role": "user", "content": "hi"}])
    assert text.startswith("<|im_start|>system\nYou are Qwen")
