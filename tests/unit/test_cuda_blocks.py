"""The cuda engine's bookkeeping on its own: KV blocks, prefix hashes, the scheduler's
batching and preemption, the sampler, and the loader's Q/K permutation."""

from __future__ import annotations

import torch

from backends.base import SamplingParams
from backends.cuda.block_manager import BlockManager
from backends.cuda.kv_layout import BLOCK_SIZE
from backends.cuda.loader import permute_qk, unpermute_qk
from backends.cuda.sampler import Sampler, filtered_probs, repetition_penalty
from backends.cuda.scheduler import Scheduler
from backends.cuda.sequence import Sequence, Status


def seq_of(n: int, start: int = 0) -> Sequence:
    return Sequence(list(range(start, start + n)))


def computed(blocks: BlockManager, seq: Sequence) -> None:
    """As after the step that computes all of `seq`'s tokens."""
    seq.num_computed = len(seq)
    blocks.register_computed(seq)


def test_allocation_takes_one_block_per_16_tokens_and_free_returns_them():
    blocks = BlockManager(10)
    seq = seq_of(33)
    blocks.allocate(seq)
    assert len(seq.block_table) == 3 and blocks.num_free == 7
    assert all(blocks.blocks[b].ref_count == 1 for b in seq.block_table)
    blocks.free_seq(seq)
    assert blocks.num_free == 10 and seq.block_table == []


def test_prefix_cache_reuses_blocks_of_shared_system_prompt():
    blocks = BlockManager(20)
    system = list(range(1000, 1040))  # 2.5 blocks shared
    a = Sequence(system + [1, 2, 3])
    blocks.allocate(a)
    computed(blocks, a)
    b = Sequence(system + [7, 8, 9, 10])
    blocks.allocate(b)
    assert b.block_table[:2] == a.block_table[:2]  # the two full shared blocks
    assert b.block_table[2] != a.block_table[2]  # the partial one is not shared
    assert b.num_computed == 2 * BLOCK_SIZE
    assert blocks.blocks[a.block_table[0]].ref_count == 2


def test_a_different_first_block_breaks_the_chain_even_if_later_blocks_match():
    blocks = BlockManager(20)
    a = Sequence(list(range(48)) + [1])
    blocks.allocate(a)
    computed(blocks, a)
    b = Sequence([999] + list(range(1, 48)) + [1])  # block 1 and 2 equal, block 0 not
    blocks.allocate(b)
    assert b.num_computed == 0
    assert not set(b.block_table) & set(a.block_table)


def test_last_token_is_never_served_from_the_cache():
    blocks = BlockManager(10)
    a = seq_of(32)
    blocks.allocate(a)
    computed(blocks, a)
    blocks.free_seq(a)
    again = seq_of(32)  # exactly two full blocks, both cached
    blocks.allocate(again)
    assert again.num_computed == 16  # the second block holds the last token: recomputed


def test_freed_cached_blocks_are_reused_until_evicted_least_recent_first():
    blocks = BlockManager(4)
    a = seq_of(33)  # 3 blocks
    blocks.allocate(a)
    computed(blocks, a)
    first = a.block_table[0]
    blocks.free_seq(a)
    assert blocks.num_free == 4
    hit = seq_of(20)
    blocks.allocate(hit)
    assert hit.num_computed == 16 and hit.block_table[0] == first
    blocks.free_seq(hit)
    # a 4-block sequence of other tokens takes every block: the cached prefix is gone
    other = seq_of(64, start=500)
    blocks.allocate(other)
    blocks.free_seq(other)
    miss = seq_of(20)
    blocks.allocate(miss)
    assert miss.num_computed == 0


def test_eviction_takes_the_never_cached_block_before_a_cached_prefix():
    blocks = BlockManager(4)
    a = seq_of(33)
    blocks.allocate(a)
    computed(blocks, a)
    first = a.block_table[0]
    blocks.free_seq(a)  # free list: block 3 (never used), then a's blocks, tail first
    b = seq_of(5, start=700)
    blocks.allocate(b)
    assert b.block_table == [3]
    assert blocks.cached_prefix(seq_of(20)) == [first]


def test_scheduler_mixes_decodes_with_a_prompt_chunk_under_the_token_budget():
    blocks = BlockManager(64)
    sched = Scheduler(blocks, max_seqs=4, max_tokens=40)
    first = seq_of(10)
    sched.add(first)
    step = sched.schedule()
    assert [(s.seq, s.num_tokens) for s in step] == [(first, 10)]
    sched.postprocess(step)
    first.append(42)  # sampled
    long = seq_of(100, start=200)
    sched.add(long)
    step = sched.schedule()
    assert [(s.seq, s.num_tokens) for s in step] == [(first, 1), (long, 39)]
    assert step[0].samples and not step[1].samples
    sched.postprocess(step)
    first.append(43)
    step = sched.schedule()
    assert [(s.seq, s.num_tokens) for s in step] == [(first, 1), (long, 39)]


def test_scheduler_preempts_the_youngest_when_blocks_run_out_and_readmits_it_first():
    blocks = BlockManager(3)
    sched = Scheduler(blocks, max_seqs=4, max_tokens=64)
    old, young = seq_of(16), seq_of(15, start=100)
    sched.add(old)
    sched.add(young)
    step = sched.schedule()
    assert len(step) == 2 and blocks.num_free == 1
    sched.postprocess(step)
    old.append(1)
    young.append(2)
    # old needs a second block (token 17) and takes the last free one; young fits in its block
    step = sched.schedule()
    assert [s.seq for s in step] == [old, young]
    sched.postprocess(step)
    old.append(3)
    young.append(4)  # young now needs a second block too: none is left
    step = sched.schedule()
    assert [s.seq for s in step] == [old]
    assert young.status is Status.WAITING and sched.waiting[0] is young
    assert young.num_computed == 0 and young.block_table == [] and sched.preemptions == 1


def test_greedy_picks_the_largest_logit_per_row():
    logits = torch.tensor([[0.0, 3.0, 1.0], [5.0, 0.0, 1.0]])
    greedy = SamplingParams(temperature=0.0)
    assert Sampler()(logits, [greedy, greedy], [[], []], [1, 2]) == [1, 0]


def test_seeded_sampling_repeats_and_other_seeds_differ():
    logits = torch.zeros(4, 1000)
    p = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=7)
    a = Sampler()(logits, [p] * 4, [[]] * 4, [1, 2, 3, 4])
    b = Sampler()(logits, [p] * 4, [[]] * 4, [1, 2, 3, 4])
    other = Sampler()(logits, [SamplingParams(temperature=1.0, top_k=0, seed=8)] * 4,
                      [[]] * 4, [1, 2, 3, 4])
    assert a == b and a != other


def test_top_k_top_p_and_min_p_cut_the_distribution():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    def kept(**kw):
        base = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
        return (filtered_probs(logits, SamplingParams(**(base | kw))) > 0).tolist()
    assert kept(top_k=2) == [True, True, False, False]
    assert kept(top_p=0.8) == [True, True, False, False]
    assert kept(top_p=0.81) == [True, True, True, False]
    assert kept(min_p=0.25) == [True, True, True, False]  # 0.15 >= 0.125, 0.05 < 0.125


def test_repetition_penalty_lowers_seen_tokens_of_either_sign():
    logits = torch.tensor([2.0, -2.0, 1.0])
    out = repetition_penalty(logits, [0, 1, 0], 2.0)
    assert out.tolist() == [1.0, -4.0, 1.0]


def test_unpermute_inverts_llama_cpp_q_k_permutation():
    w = torch.arange(8 * 64 * 3, dtype=torch.float32).reshape(8 * 64, 3)
    permuted = permute_qk(w, 8)
    assert not torch.equal(permuted, w)
    assert torch.equal(unpermute_qk(permuted, 8), w)


def test_repetition_penalty_can_change_a_greedy_pick():
    logits = torch.tensor([[3.0, 2.0, 0.0]])
    greedy = SamplingParams(temperature=0.0, repeat_penalty=2.0)
    assert Sampler()(logits, [greedy], [[0]], [1]) == [1]  # 3/2 < 2
    assert Sampler()(logits, [greedy], [[2]], [1]) == [0]
