"""Runs the model on one scheduled step: builds the batch tensors, owns the KV cache, and on
a GPU replays CUDA graphs captured for decode steps of common batch sizes.

The batch is a flat list of tokens (every sequence's chunk, in order); per token a position
and a cache slot, per sequence its block table and length after the step (`Context`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backends.cuda.context import Context
from backends.cuda.kv_layout import BLOCK_SIZE, GRAPH_BATCH_SIZES
from backends.cuda.models.layers import CausalLM
from backends.cuda.scheduler import Scheduled

# CPU steps of up to this many tokens (decodes, speculative verifications, a draft model's
# catch-up) run on one thread: MKL's threaded matrix-vector path has a fixed cost that two
# threads do not earn back on small steps (a 4864x896 product: 1.6 ms on one thread, 7.1 ms
# on two; docs/notes/cuda-engine-on-cpu.md has these and whole-step timings, and where).
CPU_SINGLE_THREAD_DECODE = 16


@dataclass
class Batch:
    input_ids: torch.Tensor
    positions: torch.Tensor
    ctx: Context
    sample_rows: list[int]  # rows of the flat batch whose logits are sampled


class ModelRunner:
    def __init__(self, model: CausalLM, num_blocks: int, max_blocks_per_seq: int,
                 device: torch.device, dtype: torch.dtype, window_blocks: int = 0,
                 graphs: bool = True, compile: bool = False) -> None:
        """`window_blocks`: size of the sliding-window layers' own pool (0: they share the
        global cache; see window_blocks.py). `graphs`: capture CUDA graphs on a GPU.
        `compile`: decode steps run the model through torch.compile (prefill stays eager:
        its shapes change every step)."""
        self.model, self.device, self.dtype = model, device, dtype
        # dynamic=None: the first batch size compiles static, a second one recompiles with
        # that dimension symbolic (no recompile per block-table width on the CPU)
        self.decode_model = torch.compile(model) if compile else model
        self.max_blocks_per_seq = max_blocks_per_seq
        self.threads = torch.get_num_threads()
        cfg = model.config
        layers = model.attention_layers()
        self.local = [bool(window_blocks and a.window) for a in layers]
        # one allocation for the K and V of every global layer: (2, layers, slots, kv_heads,
        # head_dim), plus one scratch block no sequence owns, where padded rows of a graph
        # replay write; the same for the sliding-window layers over their smaller pool (its
        # scratch block is also where their tables point once a block slid out of reach)
        self.scratch_slot = num_blocks * BLOCK_SIZE
        self.window_scratch_slot = window_blocks * BLOCK_SIZE
        self.window_null = window_blocks
        shape = (cfg.num_kv_heads, cfg.head_dim)
        n_local = sum(self.local)
        self.kv_cache = torch.zeros(2, len(layers) - n_local, (num_blocks + 1) * BLOCK_SIZE,
                                    *shape, device=device, dtype=dtype)
        self.window_cache = (torch.zeros(2, n_local, (window_blocks + 1) * BLOCK_SIZE, *shape,
                                         device=device, dtype=dtype) if n_local else None)
        self._bind_cache()
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, dict[str, torch.Tensor]]] = {}
        if device.type == "cuda" and graphs:
            self.capture_graphs()

    def _bind_cache(self) -> None:
        """Point every attention layer at its slice of this runner's cache (again before each
        step, so two engines over one model, as in tests and benchmarks, never mix caches)."""
        index = {True: 0, False: 0}
        for attn, local in zip(self.model.attention_layers(), self.local, strict=True):
            cache = self.window_cache if local else self.kv_cache
            assert cache is not None  # a local layer means a window pool was made
            i = index[local]
            index[local] += 1
            attn.k_cache, attn.v_cache = cache[0, i], cache[1, i]
            attn.block_size = BLOCK_SIZE

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes of every KV block (both pools), what the fit model predicts."""
        caches = [self.kv_cache] + ([self.window_cache] if self.window_cache is not None else [])
        return sum(c.numel() * c.element_size() for c in caches)

    def prepare(self, scheduled: list[Scheduled]) -> Batch:
        ids, slots, tables, lens, q_lens = [], [], [], [], []
        pos: list[int] = []
        rows: list[int] = []
        for s in scheduled:
            seq, start = s.seq, s.seq.num_computed
            end = start + s.num_tokens
            ids += seq.tokens[start:end]
            pos += range(start, end)
            slots += [seq.block_table[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE
                      for p in range(start, end)]
            tables.append(seq.block_table)
            lens.append(end)
            q_lens.append(s.num_tokens)
            if s.samples:  # the last row, and one per proposed token before it
                rows += range(len(ids) - 1 - s.draft, len(ids))
        width = max(len(t) for t in tables)
        dev = self.device

        def tensor(x: list) -> torch.Tensor:
            return torch.tensor(x, dtype=torch.long, device=dev)

        decode = all(n == 1 for n in q_lens)
        ctx = Context(slot_mapping=tensor(slots),
                      block_tables=tensor([t + [0] * (width - len(t)) for t in tables]),
                      context_lens=tensor(lens),
                      query_lens=None if decode else q_lens,
                      context_lens_list=None if decode else lens)
        if self.window_cache is not None:
            local_slots, local_tables = [], []
            for s in scheduled:
                table, start = s.seq.local_table, s.seq.num_computed
                local_slots += [table[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE
                                for p in range(start, start + s.num_tokens)]
                local_tables.append(table + [self.window_null] * (width - len(table)))
            ctx.local_slot_mapping = tensor(local_slots)
            ctx.local_block_tables = tensor(local_tables)
        return Batch(tensor(ids), tensor(pos), ctx, rows)

    @torch.inference_mode()
    def run(self, scheduled: list[Scheduled], every_row: bool = False) -> torch.Tensor:
        """Logits (float32) for the sequences that sample this step, in scheduled order:
        1 + `draft` rows each (`every_row`: for every token of the batch, to score a text)."""
        self._bind_cache()
        batch = self.prepare(scheduled)
        if every_row:
            batch.sample_rows = list(range(batch.input_ids.shape[0]))
        n = batch.input_ids.shape[0]
        if self.device.type == "cpu":
            small = n <= CPU_SINGLE_THREAD_DECODE
            torch.set_num_threads(1 if small else self.threads)
        if batch.ctx.is_decode and self.graphs and n <= GRAPH_BATCH_SIZES[-1]:
            hidden = self._replay(batch)
        elif batch.ctx.is_decode:
            hidden = self.decode_model(batch.input_ids, batch.positions, batch.ctx)
        else:
            hidden = self.model(batch.input_ids, batch.positions, batch.ctx)
        return self.model.logits(hidden[batch.sample_rows])

    # -- CUDA graphs (GPU only; untested on real hardware in this repository's CI) -----------
    def capture_graphs(self) -> None:
        """One graph per decode batch size, over static input tensors sized for the largest
        block table; a step pads its batch up to the next captured size."""
        width = self.max_blocks_per_seq
        for bs in reversed(GRAPH_BATCH_SIZES):
            static = dict(
                input_ids=torch.zeros(bs, dtype=torch.long, device=self.device),
                positions=torch.zeros(bs, dtype=torch.long, device=self.device),
                slot_mapping=torch.full((bs,), self.scratch_slot, dtype=torch.long,
                                        device=self.device),
                block_tables=torch.zeros(bs, width, dtype=torch.long, device=self.device),
                context_lens=torch.ones(bs, dtype=torch.long, device=self.device))
            ctx = Context(static["slot_mapping"], static["block_tables"],
                          static["context_lens"])
            if self.window_cache is not None:
                static["local_slot_mapping"] = torch.full(
                    (bs,), self.window_scratch_slot, dtype=torch.long, device=self.device)
                static["local_block_tables"] = torch.full(
                    (bs, width), self.window_null, dtype=torch.long, device=self.device)
                ctx.local_slot_mapping = static["local_slot_mapping"]
                ctx.local_block_tables = static["local_block_tables"]
            with torch.inference_mode():
                # warm up (and compile: inductor's kernels are captured, not traced)
                self.decode_model(static["input_ids"], static["positions"], ctx)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                pool = self.graphs[GRAPH_BATCH_SIZES[-1]][0].pool() if self.graphs else None
                with torch.cuda.graph(graph, pool=pool):
                    static["hidden"] = self.decode_model(static["input_ids"],
                                                         static["positions"], ctx)
            self.graphs[bs] = (graph, static)

    def _replay(self, batch: Batch) -> torch.Tensor:
        n = batch.input_ids.shape[0]
        bs = next(b for b in GRAPH_BATCH_SIZES if b >= n)
        graph, static = self.graphs[bs]
        static["input_ids"].zero_()
        static["slot_mapping"].fill_(self.scratch_slot)
        static["block_tables"].zero_()
        static["context_lens"].fill_(1)
        static["input_ids"][:n] = batch.input_ids
        static["positions"][:n] = batch.positions
        static["slot_mapping"][:n] = batch.ctx.slot_mapping
        width = batch.ctx.block_tables.shape[1]
        static["block_tables"][:n, :width] = batch.ctx.block_tables
        static["context_lens"][:n] = batch.ctx.context_lens
        if self.window_cache is not None:
            static["local_slot_mapping"].fill_(self.window_scratch_slot)
            static["local_block_tables"].fill_(self.window_null)
            local_slots, local_tables = batch.ctx.local_slot_mapping, batch.ctx.local_block_tables
            assert local_slots is not None and local_tables is not None  # prepare() made them
            static["local_slot_mapping"][:n] = local_slots
            static["local_block_tables"][:n, :width] = local_tables
        graph.replay()
        return static["hidden"][:n]
