"""Speculative decoding in the cuda engine, without real models: the rejection sampler's
output distribution (chi-square), greedy verification, and the KV rollback, on tiny
random-weight models that run the real engine in float64. Prompt lookup and the cost model
are shared by every backend: test_speculation.py."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from backends.base import SamplingParams, SpeculativeParams
from backends.cuda.block_manager import BlockManager, block_hash
from backends.cuda.engine import GREEDY, Engine, EngineConfig
from backends.cuda.kv_layout import BLOCK_SIZE
from backends.cuda.model_config import ModelConfig
from backends.cuda.models import build_model
from backends.cuda.models.layers import CausalLM
from backends.cuda.rejection import rejection_sample, verify_greedy
from backends.cuda.sequence import Sequence

LOOKUP = SpeculativeParams(method="lookup", max_draft=5)
DRAFT = SpeculativeParams(method="draft", draft_model="tiny-draft", max_draft=4)


# -- the rejection sampler's distribution -------------------------------------------------
def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """P(X >= the statistic) for X ~ chi-square with (categories - 1) degrees of freedom."""
    expected = probs * counts.sum()
    stat = float(((counts - expected) ** 2 / expected).sum())
    return float(torch.special.gammaincc(torch.tensor((len(probs) - 1) / 2),
                                         torch.tensor(stat / 2)))


def always_accept(p, q, proposals, generator):
    """A wrong sampler: takes every proposal (its output follows q, not p)."""
    return [*proposals, int(torch.multinomial(p[len(proposals)], 1, generator=generator))]


def resample_from_p(p, q, proposals, generator):
    """A wrong sampler: the right acceptance test, but draws the replacement from p."""
    for i, d in enumerate(proposals):
        if float(torch.rand((), generator=generator)) * float(q[i, d]) >= float(p[i, d]):
            return [*proposals[:i], int(torch.multinomial(p[i], 1, generator=generator))]
    return [*proposals, int(torch.multinomial(p[len(proposals)], 1, generator=generator))]


def emitted_distributions(sampler, one_hot: bool, n: int = 12000, vocab: int = 6):
    """Counts of the first emitted token, and of the second one when the first proposal was
    accepted, over `n` verifications of 2 proposals against random p and q; and p."""
    g = torch.Generator().manual_seed(1234)
    dirichlet = torch.distributions.Dirichlet(torch.ones(vocab))
    torch.manual_seed(99)
    p, q = dirichlet.sample((3,)), dirichlet.sample((2,))
    first, second = torch.zeros(vocab), torch.zeros(vocab)
    fixed = [int(p[0].argmax()), int(p[1].argmax())]  # a good n-gram match, say
    for _ in range(n):
        proposals = fixed if one_hot else \
            [int(torch.multinomial(q[i], 1, generator=g)) for i in range(2)]
        out = sampler(p, None if one_hot else q, proposals, g)
        first[out[0]] += 1
        if out[0] == proposals[0] and len(out) > 1:
            second[out[1]] += 1
    return first, second, p


@pytest.mark.parametrize("one_hot", [False, True], ids=["draft-q", "lookup-one-hot"])
def test_rejection_sampler_emits_tokens_with_the_target_distribution(one_hot):
    first, second, p = emitted_distributions(rejection_sample, one_hot)
    assert chi_square_p_value(first, p[0]) > 0.001
    assert second.sum() > 1500
    assert chi_square_p_value(second, p[1]) > 0.001


@pytest.mark.parametrize("wrong", [always_accept, resample_from_p])
def test_a_wrong_sampler_fails_the_same_chi_square_test(wrong):
    first, _, p = emitted_distributions(wrong, one_hot=False)
    assert chi_square_p_value(first, p[0]) < 1e-6


def test_greedy_verification_keeps_the_agreeing_prefix_then_the_model_token():
    assert verify_greedy([5, 6, 7, 8], [5, 6, 9]) == [5, 6, 7]
    assert verify_greedy([5, 6, 7, 8], [5, 6, 7]) == [5, 6, 7, 8]  # all held: bonus token
    assert verify_greedy([5, 6], [4]) == [5]


# -- the KV rollback ------------------------------------------------------------------------
def assert_blocks_consistent(blocks: BlockManager, seqs: list[Sequence]) -> None:
    """Ref counts equal the tables holding each block, free means unreferenced, every table
    covers the sequence's computed tokens and no more blocks than its tokens need, and a
    hashed block in a table holds exactly the (computed) tokens its chained hash names."""
    refs = Counter(b for s in seqs for b in s.block_table)
    for block in blocks.blocks:
        assert block.ref_count == refs[block.id]
        assert (block.id in blocks.free) == (block.ref_count == 0)
    for s in seqs:
        assert -(-s.num_computed // BLOCK_SIZE) <= len(s.block_table) <= s.num_blocks
        prev = None
        for i, block_id in enumerate(s.block_table):
            h = blocks.blocks[block_id].hash
            if h is None:
                break
            assert (i + 1) * BLOCK_SIZE <= s.num_computed
            assert h == block_hash(s.block(i), prev)
            prev = h
    for h, block_id in blocks.by_hash.items():
        assert blocks.blocks[block_id].hash == h


def test_truncate_frees_blocks_of_rejected_tokens_first_in_line_and_keeps_the_rest():
    blocks = BlockManager(8)
    seq = Sequence(list(range(40)))
    blocks.allocate(seq)
    seq.num_computed = 39
    blocks.register_computed(seq)  # blocks 0 and 1 are full and hashed
    seq.tokens += [7] * 12  # 12 proposals: 52 tokens, a fourth block
    blocks.ensure_slots(seq, len(seq))
    fourth = seq.block_table[3]
    blocks.truncate(seq, 43)  # 3 accepted
    assert len(seq) == 43 and len(seq.block_table) == 3 and seq.num_computed == 39
    assert next(iter(blocks.free)) == fourth and blocks.blocks[fourth].ref_count == 0
    assert_blocks_consistent(blocks, [seq])


def test_truncate_below_a_hashed_block_unhashes_it_before_it_is_rewritten():
    blocks = BlockManager(8)
    seq = Sequence(list(range(40)))
    blocks.allocate(seq)
    seq.num_computed = 39
    blocks.register_computed(seq)
    second = seq.block_table[1]
    blocks.truncate(seq, 20)  # as a draft's shadow whose proposals filled block 1
    assert blocks.blocks[second].hash is None and len(blocks.by_hash) == 1
    assert_blocks_consistent(blocks, [seq])


TINY = ModelConfig("qwen2", vocab_size=48, hidden_size=32, num_layers=2, num_heads=4,
                   num_kv_heads=2, head_dim=8, intermediate_size=64, rms_norm_eps=1e-6,
                   rope_theta=10000.0, max_position=512, qkv_bias=True)


# Gemma 3's shape in miniature: a sliding-window layer (window 32) and a global one, so a
# 60-token answer slides out of the window and the window pool (window_blocks.py) is used.
TINY_GEMMA = ModelConfig("gemma3", vocab_size=48, hidden_size=32, num_layers=2, num_heads=4,
                         num_kv_heads=2, head_dim=8, intermediate_size=64, rms_norm_eps=1e-6,
                         rope_theta=10000.0, max_position=512, qk_norm=True,
                         sliding_window=32, sliding_pattern=2)


def tiny_model(seed: int, like: CausalLM | None = None, noise: float = 0.0,
               config: ModelConfig = TINY) -> CausalLM:
    """Random weights large enough for peaked distributions (no near-ties), in float64;
    `like`: the weights of another tiny model plus `noise` (a draft that mostly agrees)."""
    g = torch.Generator().manual_seed(seed)
    model = build_model(config).to_empty(device="cpu").to(torch.float64)
    source = dict(like.state_dict()) if like is not None else {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif like is not None:
                p.copy_(source[name] + noise * torch.randn(p.shape, generator=g,
                                                           dtype=p.dtype))
            else:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.4)
        if like is None and model.embed_scale != 1.0:
            # Gemma scales its (tied) embedding up: keep it from drowning the layers, or the
            # model just repeats its input
            model.tok_embd.weight.mul_(0.1)
    model.load_weights(dict(model.state_dict()))
    return model.eval()


@pytest.fixture(scope="module")
def tiny() -> tuple[CausalLM, CausalLM]:
    target = tiny_model(1)
    return target, tiny_model(2, like=target, noise=0.08)


def tiny_engine(target: CausalLM, draft: CausalLM | None, **config) -> Engine:
    base = dict(context=256, max_seqs=4, max_tokens=64, adaptive_speculation=False)
    engine = Engine(target, EngineConfig(**(base | config)), torch.device("cpu"),
                    torch.float64)
    engine.use_draft(draft, "tiny-draft")
    return engine


PROMPTS = [[3, 4, 5, 6, 7, 3, 4, 5, 6, 7, 3, 4], list(range(10, 30)), [40, 41, 2, 40, 41],
           list(range(1, 45))]


def assert_window_pool_consistent(engine: Engine, seqs: list[Sequence]) -> None:
    window = engine.blocks.window
    refs = Counter(b for s in seqs for b in s.local_table if b != window.null)
    for block in window.pool.blocks:
        assert block.ref_count == refs[block.id]
    for s in seqs:
        assert len(s.local_table) == len(s.block_table)


def run_checked(engine: Engine, seqs: list[Sequence]) -> None:
    """Generate to the end, checking the blocks after every step."""
    for seq in seqs:
        engine.add(seq)
    while engine.has_work():
        for seq, _ in engine.step():
            if seq.num_output >= seq.max_new and seq.status.value != "finished":
                engine.finish(seq)
        live = [s for s in seqs if s.status.value == "running"]
        assert_blocks_consistent(engine.blocks, live)
        if engine.blocks.window is not None:
            assert_window_pool_consistent(engine, live)
        draft = engine.speculator.draft
        assert_blocks_consistent(draft.blocks, list(draft.shadows.values()))


def test_greedy_batch_of_mixed_speculation_equals_plain_greedy_and_blocks_stay_consistent(tiny):
    target, draft = tiny
    plain = tiny_engine(target, None).generate(PROMPTS, 30)
    engine = tiny_engine(target, draft)
    # lookup on the prompt whose answer repeats bigrams of itself, which prompt lookup needs
    # (the tiny model's answers to the others barely do)
    specs = [DRAFT, DRAFT, None, LOOKUP]
    seqs = [Sequence(list(p), GREEDY, 30, speculative=s) for p, s in zip(PROMPTS, specs,
                                                                         strict=True)]
    run_checked(engine, seqs)
    assert [s.output for s in seqs] == plain
    for seq in (seqs[0], seqs[1], seqs[3]):
        assert 0 < seq.num_accepted < seq.num_drafted  # some held, some were rolled back
    assert seqs[2].num_drafted == 0
    assert engine.blocks.num_free == len(engine.blocks.blocks)
    assert not engine.speculator.draft.shadows  # finished sequences left the draft too


def test_adaptive_speculation_keeps_greedy_output_and_runs_the_shared_policy(tiny):
    """With the cost model choosing (backends.speculation), whatever it picks on this
    machine, the answers stay the model's own; every speculating sequence has its policy
    state, and prompt lookup's index follows the accepted tokens."""
    target, draft = tiny
    plain = tiny_engine(target, None).generate(PROMPTS, 30)
    engine = tiny_engine(target, draft, adaptive_speculation=True)
    specs = [DRAFT, LOOKUP, None, LOOKUP]
    seqs = [Sequence(list(p), GREEDY, 30, speculative=s) for p, s in zip(PROMPTS, specs,
                                                                         strict=True)]
    for seq in seqs:
        engine.add(seq)
    policies = {}
    while engine.has_work():
        engine.step()
        policies.update(engine.speculator.requests)
        for seq in seqs:
            if seq.num_output >= seq.max_new and seq.status.value != "finished":
                engine.finish(seq)
    assert [s.output for s in seqs] == plain
    assert id(seqs[2]) not in policies and len(policies) == 3
    lookup = policies[id(seqs[3])].lookup
    assert lookup is not None and lookup.tokens == PROMPTS[3] + seqs[3].output[:-1]
    assert not engine.speculator.requests  # finished sequences leave it


def test_prefix_cache_after_speculation_serves_only_accepted_tokens(tiny):
    target, draft = tiny
    engine = tiny_engine(target, draft)
    first = engine.generate_seqs([PROMPTS[1]], 40, speculative=DRAFT)[0]
    assert first.num_drafted > first.num_accepted > 0
    # the whole first answer as a prompt: its blocks come from the cache, and greedy goes on
    # exactly as without speculation and without the cache
    again = Sequence(list(first.tokens), GREEDY, 8)
    engine.add(again)
    while again.num_output < 8:
        engine.step()
    assert again.num_cached >= 3 * BLOCK_SIZE
    assert again.output == tiny_engine(target, None).generate([first.tokens], 8)[0]


def test_seeded_sampling_with_speculation_repeats_and_stays_in_the_filtered_support(tiny):
    target, draft = tiny
    params = SamplingParams(temperature=0.9, top_k=5, top_p=0.9, min_p=0.05, seed=11)

    def run() -> Sequence:
        return tiny_engine(target, draft).generate_seqs([PROMPTS[1]], 24, params, DRAFT)[0]

    a, b = run(), run()
    assert a.output == b.output and a.num_drafted > 0
    assert a.num_accepted > 0


def test_a_draft_request_without_a_draft_model_is_refused(tiny):
    engine = tiny_engine(tiny[0], None)
    with pytest.raises(ValueError, match="none is loaded"):
        engine.add(Sequence(list(PROMPTS[0]), GREEDY, 4, speculative=DRAFT))


def test_the_draft_caches_the_prompt_it_caught_up_on_for_the_next_request(tiny):
    target, draft = tiny
    engine = tiny_engine(target, draft)
    seq = engine.generate_seqs([PROMPTS[3]], 3, speculative=DRAFT)[0]  # one proposing step
    assert seq.num_drafted > 0
    assert len(engine.speculator.draft.blocks.by_hash) == len(PROMPTS[3]) // BLOCK_SIZE


def test_speculation_past_a_sliding_window_equals_plain_greedy():
    target = tiny_model(3, config=TINY_GEMMA)
    draft = tiny_model(4, like=target, noise=0.08, config=TINY_GEMMA)
    plain = tiny_engine(target, None).generate(PROMPTS[:3], 60)
    engine = tiny_engine(target, draft)
    assert engine.blocks.window is not None
    seqs = [Sequence(list(p), GREEDY, 60, speculative=s)
            for p, s in zip(PROMPTS[:3], [LOOKUP, DRAFT, None], strict=True)]
    run_checked(engine, seqs)
    assert [s.output for s in seqs] == plain
    assert seqs[0].num_accepted > 0 and seqs[1].num_accepted > 0
    assert seqs[1].num_accepted < seqs[1].num_drafted


def test_logprob_rows_are_the_targets_raw_rows_with_speculation_and_a_penalty(tiny):
    """A sequence that asks for logprobs gets, for every token, the row the target model gave
    at its position (a verification row when a proposal held), before the repeat penalty
    and temperature shape the draw: the rows of teacher-forced scoring. One that does not
    ask keeps none."""
    target, draft = tiny
    engine = tiny_engine(target, draft)
    sampled = SamplingParams(temperature=0.8, seed=3, repeat_penalty=1.5)
    seqs = [Sequence(list(PROMPTS[1]), sampled, 20, speculative=DRAFT, logprobs=2),
            Sequence(list(PROMPTS[0]), GREEDY, 20, speculative=DRAFT, logprobs=0),
            Sequence(list(PROMPTS[3]), GREEDY, 20, speculative=LOOKUP)]
    rows: dict[int, list[torch.Tensor]] = {id(s): [] for s in seqs}
    for seq in seqs:
        engine.add(seq)
    while engine.has_work():
        for seq, _ in engine.step():
            rows[id(seq)] += seq.raw_rows
            seq.raw_rows = []
            if seq.num_output >= seq.max_new and seq.status.value != "finished":
                engine.finish(seq)
    for seq in seqs[:2]:
        assert seq.num_accepted > 0  # some rows came from verification
        scored = engine.score(seq.tokens[:-1])[seq.num_prompt - 1:]
        got = torch.stack(rows[id(seq)])
        assert got.shape == scored.shape
        torch.testing.assert_close(got, scored, rtol=0, atol=1e-5)
    assert rows[id(seqs[2])] == []


# -- verification as a multi-row decode (the path CUDA graphs capture on a GPU) -------------
@pytest.mark.parametrize("spec", [LOOKUP, DRAFT,
                                  SpeculativeParams(method="draft", draft_model="tiny-draft",
                                                    max_draft=8)],
                         ids=["lookup", "draft-4", "draft-8"])
@pytest.mark.parametrize("padded", [False, True], ids=["exact-rows", "graph-rows"])
def test_verification_runs_as_a_multi_row_decode_and_keeps_greedy_output(tiny, spec, padded):
    """Every verification step goes through the paged multi-row decode (one attention call
    for all rows), not the prefill path: the only prefill steps are the prompts'. With the
    graphs' layout (rows padded up to VERIFY_ROWS, as a replay runs them) the same."""
    target, draft = tiny
    prompts = [PROMPTS[0], PROMPTS[1]]
    plain = [tiny_engine(target, None).generate([p], 30)[0] for p in prompts]
    for prompt, want in zip(prompts, plain, strict=True):
        engine = tiny_engine(target, draft)
        engine.runner.pad_rows = padded
        seq = engine.generate_seqs([prompt], 30, speculative=spec)[0]
        assert seq.output == want
        assert seq.num_drafted > 0
        paths = engine.runner.paths
        assert paths["verify"] > 0 and paths["prefill"] == 1, paths


def test_a_batch_of_decodes_and_verifications_pads_the_decodes_and_keeps_output(tiny):
    target, draft = tiny
    plain = tiny_engine(target, None).generate(PROMPTS, 30)
    engine = tiny_engine(target, draft)
    engine.runner.pad_rows = True
    seqs = [Sequence(list(p), GREEDY, 30, speculative=s)
            for p, s in zip(PROMPTS, [DRAFT, None, LOOKUP, None], strict=True)]
    run_checked(engine, seqs)
    assert [s.output for s in seqs] == plain
    assert engine.runner.paths["verify"] > 0


def test_more_proposals_than_the_multi_row_decode_takes_verify_as_a_prefill(tiny):
    target, draft = tiny
    spec = SpeculativeParams(method="draft", draft_model="tiny-draft", max_draft=10)
    engine = tiny_engine(target, draft)
    seq = engine.generate_seqs([PROMPTS[1]], 30, speculative=spec)[0]
    assert seq.output == tiny_engine(target, None).generate([PROMPTS[1]], 30)[0]
    assert engine.runner.paths["prefill"] > 1  # 11-row verifications


def test_calibration_at_start_gives_the_cost_model_every_verification_size(tiny):
    engine = tiny_engine(tiny[0], None, calibrate_speculation=True)
    rows = engine.speculator.times.rows
    assert sorted(rows) == list(range(1, 10)) and all(t > 0 for t in rows.values())
    assert not engine.runner.paths  # calibration steps are not counted as the engine's
    assert engine.blocks.num_free == len(engine.blocks.blocks)  # it used the scratch block
    configured = tiny_engine(tiny[0], None, step_times=((1, 0.01), (9, 0.012)))
    assert configured.speculator.times.rows == {1: 0.01, 9: 0.012}
    assert configured.speculator.times.cost(5) == pytest.approx(0.011)
    with pytest.raises(ValueError, match="0 rows"):
        tiny_engine(tiny[0], None, step_times=((0, 0.01),))
