import pytest

from app.gguf_file import read_gguf
from backends.chat_template import render_chat
from backends.errors import TemplateError


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


@pytest.mark.parametrize("payload", [
    # CVE-2024-34359 style: walk from a string to os via subclasses
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{{ self._TemplateReference__context.joiner.__init__.__globals__ }}",
    "{% for m in messages %}{{ m['__class__'] }}{% endfor %}",
])
def test_sandbox_escape_is_refused_before_rendering(payload):
    with pytest.raises(TemplateError, match="refused"):
        render_chat(payload, [{"role": "user", "content": "x"}])


def test_obfuscated_escape_is_refused_by_the_sandbox():
    payload = "{% set a = ''|attr('__cla' ~ 'ss__') %}{{ a.mro() }}"
    with pytest.raises(TemplateError, match="refused by the sandbox"):
        render_chat(payload, [])


def test_raise_exception_from_template_is_a_clear_error():
    template = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(TemplateError, match="roles must alternate"):
        render_chat(template, [])


def test_broken_template_does_not_compile():
    with pytest.raises(TemplateError, match="does not compile"):
        render_chat("{% for x in %}", [])
