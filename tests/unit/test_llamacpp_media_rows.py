"""The llama.cpp engine's rules for media in a prompt, without a model: prompt rows stop at
an image (decoded on its own), an image's pseudo-tokens are the prefix cache's key, a cache
keeps an image whole or not at all, and KV positions after an M-RoPE image shift
(backends/llamacpp/engine.py, vision.py). The decode itself runs on the tiny vision models
in tests/integration/test_llamacpp_vision.py."""

from __future__ import annotations

from backends.llamacpp import engine
from backends.llamacpp.speculative import common_prefix
from backends.llamacpp.vision import MediaSpan, pseudo_tokens

DIGEST_A = "a" * 64
DIGEST_B = "b" * 64


def job_with_image(text_before: int, n_image: int, text_after: int,
                   digest: str = DIGEST_A, n_pos: int | None = None) -> engine.Job:
    prompt = (list(range(1, text_before + 1)) + pseudo_tokens(digest, n_image)
              + list(range(100, 100 + text_after)))
    job = engine.Job("s", None, None, prompt, None, 8, truncated=False, text=None)
    job.spans = (MediaSpan(text_before, text_before + n_image,
                           n_image if n_pos is None else n_pos, "image", None),)
    return job


def test_pseudo_tokens_are_negative_and_name_the_image():
    a, b = pseudo_tokens(DIGEST_A, 256), pseudo_tokens(DIGEST_B, 256)
    assert all(t < 0 for t in a + b)
    assert len(set(a)) == 256
    assert a == pseudo_tokens(DIGEST_A, 256)  # the same image is the same run
    assert a[0] != b[0]  # another image differs from its first position
    prompt_a = [5, 6] + a + [7]
    prompt_b = [5, 6] + b + [7]
    assert common_prefix(prompt_a, prompt_b) == 2


def test_prompt_rows_stop_at_an_image_and_go_on_after_it():
    job = job_with_image(10, 256, 20)
    slot = engine.Slot(0, job=job)
    (_, start, end), = engine.plan_prompt_rows([slot], 512)
    assert (start, end) == (0, 10)  # the text before the image
    job.pos = 10
    assert engine.plan_prompt_rows([slot], 512) == []  # the image: decoded on its own
    assert job.span_at(10) is job.spans[0]
    job.pos = 266
    (_, start, end), = engine.plan_prompt_rows([slot], 512)
    assert (start, end) == (266, 286)
    assert job.prefill_end() == 286


def test_a_waiting_prompt_at_an_image_leaves_the_room_to_the_next():
    at_image = engine.Slot(0, job=job_with_image(0, 256, 5))
    text = engine.Slot(1, job=engine.Job("t", None, None, list(range(40)), None, 8,
                                         truncated=False, text=None))
    assert [(s.seq_id, a, b) for s, a, b in engine.plan_prompt_rows([at_image, text], 64)] \
        == [(1, 0, 40)]


def test_kv_positions_after_an_mrope_image_shift_by_what_it_saves():
    slot = engine.Slot(0)
    slot.tokens = list(range(300))
    slot.shifts = [(266, 256 - 16)]  # an image at 10..266 taking 16 positions
    assert slot.kv_pos(10) == 10
    assert slot.kv_pos(266) == 26
    assert slot.kv_pos(299) == 59
    slot.cut(266)  # the image stays
    assert slot.shifts == [(266, 240)]
    slot.cut(10)  # the image goes
    assert slot.shifts == [] and slot.kv_pos(10) == 10


def test_a_cache_keeps_an_image_whole_or_not_at_all():
    """A prefix that ends inside an image's run restarts at the image."""
    spans = job_with_image(10, 256, 20).spans
    assert engine.whole_spans(100, spans) == 10
    assert engine.whole_spans(10, spans) == 10
    assert engine.whole_spans(266, spans) == 266
    assert engine.whole_spans(280, spans) == 280
    assert engine.whole_spans(5, ()) == 5
