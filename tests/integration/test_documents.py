"""Issue 21's test of documents in the chat: a 200-page PDF, too long for the prompt, whose
answer sits on one page. Its pieces are embedded with the real all-MiniLM-L6-v2 (through the
Runtime, in its own worker), the pieces closest to the question go into the prompt of the real
Qwen2.5-Coder-1.5B, and the answer and the citation must be right."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from fpdf import FPDF

from app.documents.embedder import RuntimeEmbedder
from app.documents.library import DocumentLibrary
from app.runtime import Runtime
from backends.base import GenerationRequest, Message, SamplingParams

PAGES = 200
FACT_PAGE = 137
FACT = "The maintenance code for the north turbine is 7391-KESTREL."
CODE = "7391-KESTREL"
QUESTION = "What is the maintenance code for the north turbine?"
# Made-up chapters, each page on one topic, so the pages are unlike each other as in a real
# book. One page near the fact's mentions the north turbine without a code (a near miss).
TOPICS = {
    "orchard": "apple pear graft blossom pruning frost ladder cider harvest bees",
    "harbour": "ferry tide mooring crane pier gull fog lighthouse cargo rope",
    "bakery": "dough oven rye starter crust flour proofing baker loaf morning",
    "railway": "signal sleeper timetable platform carriage junction guard whistle",
    "library": "catalogue shelf archive reader lamp ledger binding atlas index",
    "observatory": "telescope comet eclipse lens dome orbit star chart night",
    "textile mill": "loom spindle wool dye shuttle weaver pattern bobbin cotton",
    "mountain hut": "ridge snow stove boots map cairn avalanche rope summit",
    "village school": "chalk slate lesson pupil bell recess spelling ink register",
    "market": "stall cheese scale coin vendor basket herbs awning bargain",
}
NEAR_MISS = "The north turbine was painted green last spring, and its railings were replaced."


def page_text(n: int) -> str:
    rng = random.Random(n)
    topic = list(TOPICS)[n % len(TOPICS)]
    words = TOPICS[topic].split()
    sentences = [f"Chapter {n}: notes on the {topic}."]
    for _ in range(11):  # about 1,000 characters: one piece a page, 200 to embed
        picked = rng.sample(words, 4)
        where = rng.choice(["near", "past", "behind", "beside"])
        sentences.append(f"The {picked[0]} and the {picked[1]} were {where} the {picked[2]}, "
                         f"said the keeper of the {picked[3]}.")
    if n == FACT_PAGE:
        sentences.insert(8, FACT)
    if n == FACT_PAGE - 40:
        sentences.insert(6, NEAR_MISS)
    return " ".join(sentences)


@pytest.fixture(scope="module")
def manual(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for n in range(1, PAGES + 1):
        pdf.add_page()
        pdf.multi_cell(0, 6, page_text(n))
    path = tmp_path_factory.mktemp("manual") / "plant-manual.pdf"
    pdf.output(str(path))
    return path


def test_a_200_page_pdf_is_answered_from_its_one_page_and_cited(tmp_path, store, qwen15,
                                                                 minilm, manual):
    library = DocumentLibrary(tmp_path / "documents.db")
    attached = library.attach(1, manual)
    assert attached.pages == PAGES
    with Runtime(store=store) as rt:
        rt.load(qwen15.ref, context=2048)
        embedder = RuntimeEmbedder(rt, minilm.ref)

        def chat_tokens(text: str) -> int:
            return len(rt.tokenize(qwen15.ref, text))

        progress: list[tuple[float, str]] = []
        started = time.monotonic()
        context = library.context_for(1, QUESTION, 1000, chat_tokens, embedder,
                                      lambda m: progress.append((time.monotonic(), m)))
        first = time.monotonic() - started
        split = progress[1][0] - started
        started = time.monotonic()
        again = library.context_for(1, QUESTION, 1000, chat_tokens, embedder)
        second = time.monotonic() - started
        request = GenerationRequest(
            messages=(Message("user", f"{context.prompt_text}\n\n{QUESTION}"),),
            sampling=SamplingParams(temperature=0, max_tokens=24))
        answer, _ = rt.generate(qwen15.ref, request).result()
    print(f"first question: {first:.1f} s ({split:.1f} s to split; {progress[-1][1]}); "
          f"again: {second:.1f} s; pieces used: {[p.citation() for p in context.pieces]}")
    assert not context.whole and context.tokens <= 1000
    assert progress[0][1] == "splitting plant-manual.pdf"
    assert progress[-1][1].startswith("embedding plant-manual.pdf: ")
    hits = [p for p in context.pieces if CODE in p.text]  # two, when it is on an overlap
    assert hits and {p.citation() for p in hits} == {f"plant-manual.pdf, page {FACT_PAGE}"}
    assert f"[plant-manual.pdf, page {FACT_PAGE}]\n" in context.prompt_text
    assert again == context  # the vectors were kept: the same pieces, no embedding
    assert CODE in answer, answer
