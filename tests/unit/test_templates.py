"""Chat templates render in a sandbox: escapes are refused, a template's own errors are
clear."""

import pytest

from backends.chat_template import render_chat
from backends.errors import TemplateError


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


@pytest.mark.parametrize("payload", [
    # CVE-2025-27516: |attr reaches str.format, whose fields walk attributes unchecked
    "{% set f = ('{0._' ~ '_class_' ~ '_._' ~ '_mro_' ~ '_}')|attr('format') %}"
    "{{ f(messages) }}",
    # CVE-2024-56326: a stored reference to str.format, called later
    "{% set f = ('{0._' ~ '_init_' ~ '_._' ~ '_globals_' ~ '_}').format %}{{ f(cycler) }}",
])
def test_the_jinja2_format_escapes_are_refused_by_the_sandbox(payload):
    with pytest.raises(TemplateError, match="refused by the sandbox"):
        render_chat(payload, [{"role": "user", "content": "x"}])


def test_jinja2_is_pinned_past_its_sandbox_escapes():
    import tomllib
    from importlib.metadata import version

    from tests.support import REPO

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "jinja2>=3.1.6" in deps
    assert tuple(int(p) for p in version("jinja2").split(".")[:3]) >= (3, 1, 6)


def test_generation_blocks_render_their_body():
    source = ("{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}"
              "{% endfor %}")
    assert render_chat(source, [{"role": "user", "content": "hi"}]) == "[hi]"


def test_tojson_takes_hugging_face_s_keyword_arguments():
    source = "{{ messages[0] | tojson(ensure_ascii=False, sort_keys=True) }}"
    assert render_chat(source, [{"role": "user", "content": "é"}]) == \
        '{"content": "é", "role": "user"}'
    assert render_chat("{{ 'é' | tojson(ensure_ascii=True) }}", []) == '"\\u00e9"'
