"""Runs the model on one scheduled step: builds the batch tensors, owns the KV cache, and on
a GPU replays CUDA graphs captured for decode steps of common batch sizes, and for
verification steps (speculative decoding) of common (batch, rows per sequence) sizes.

The batch is a flat list of tokens (every sequence's chunk, in order); per token a position
and a cache slot, per sequence its block table and length after the step (`Context`).
A step where every sequence brings only its last token and 0..8 proposals is a multi-row
decode, not a prefill: each sequence gets the same number of rows (padded), and attention
is one paged-kernel launch over them (kernels.paged_attention.paged_verify), so the step has
a fixed shape a graph can capture.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

import torch

from backends.cuda.context import Context
from backends.cuda.kv_layout import (
    BLOCK_SIZE,
    GRAPH_BATCH_SIZES,
    VERIFY_BATCH_SIZES,
    VERIFY_ROWS,
)
from backends.cuda.models.layers import CausalLM
from backends.cuda.scheduler import Scheduled
from backends.cuda.sequence import Sequence

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
                 graphs: bool = True, verify_graphs: bool = True,
                 compile: bool = False) -> None:
        """`window_blocks`: size of the sliding-window layers' own pool (0: they share the
        global cache; see window_blocks.py). `graphs`: capture CUDA graphs on a GPU;
        `verify_graphs`: also the verification steps' (a draft model never verifies).
        `compile`: decode and verification steps run the model through torch.compile
        (prefill stays eager: its shapes change every step)."""
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
        # by (batch, rows per sequence): the verification steps' graphs
        self.verify_graphs: dict[tuple[int, int],
                                 tuple[torch.cuda.CUDAGraph, dict[str, torch.Tensor]]] = {}
        self.verify_graph_bytes = 0  # GPU memory the verification graphs reserved
        self.paths: Counter[str] = Counter()  # steps run, by path (tests assert on it)
        # pad verification rows up to VERIFY_ROWS (the graphs' shapes); set once they are
        # captured, and by tests to run that layout eagerly on a CPU
        self.pad_rows = False
        if device.type == "cuda" and graphs:
            self.capture_graphs(verify_graphs)

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

    def verify_rows(self, scheduled: list[Scheduled]) -> int:
        """Rows per sequence if this step is a multi-row decode: every sequence brings its
        last token and at most VERIFY_ROWS[-1] - 1 proposals, one of them some; padded up to
        a captured graph's rows where a graph will run it. 0: a plain decode or a prefill."""
        if not all(s.samples and s.num_tokens == 1 + s.draft for s in scheduled):
            return 0
        most = max(s.num_tokens for s in scheduled)
        if most == 1 or most > VERIFY_ROWS[-1]:
            return 0
        if self.pad_rows and len(scheduled) <= VERIFY_BATCH_SIZES[-1]:
            return next(r for r in VERIFY_ROWS if r >= most)
        return most

    def prepare(self, scheduled: list[Scheduled]) -> Batch:
        ids, slots, tables, lens, q_lens = [], [], [], [], []
        pos: list[int] = []
        rows: list[int] = []
        per_seq = self.verify_rows(scheduled)  # 0: no padding
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
            pad = max(0, per_seq - s.num_tokens)  # rows that write the scratch slot
            ids += [0] * pad
            pos += [end - 1] * pad
            slots += [self.scratch_slot] * pad
        width = max(len(t) for t in tables)
        dev = self.device

        def tensor(x: list) -> torch.Tensor:
            return torch.tensor(x, dtype=torch.long, device=dev)

        decode = per_seq > 0 or all(n == 1 for n in q_lens)
        ctx = Context(slot_mapping=tensor(slots),
                      block_tables=tensor([t + [0] * (width - len(t)) for t in tables]),
                      context_lens=tensor(lens),
                      query_lens=None if decode else q_lens,
                      context_lens_list=None if decode else lens,
                      rows=max(per_seq, 1),
                      query_rows=tensor(q_lens) if per_seq else None)
        if self.window_cache is not None:
            local_slots, local_tables = [], []
            for s in scheduled:
                table, start = s.seq.local_table, s.seq.num_computed
                local_slots += [table[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE
                                for p in range(start, start + s.num_tokens)]
                local_slots += [self.window_scratch_slot] * max(0, per_seq - s.num_tokens)
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
        return self.model.logits(self._forward(batch)[batch.sample_rows])

    def _forward(self, batch: Batch) -> torch.Tensor:
        ctx = batch.ctx
        path = "prefill" if not ctx.is_decode else "decode" if ctx.rows == 1 else "verify"
        graph = self._graph_for(batch)
        self.paths[path + ("_graph" if graph is not None else "")] += 1
        if graph is not None:
            return self._replay(batch, *graph)
        model = self.decode_model if ctx.is_decode else self.model
        return model(batch.input_ids, batch.positions, ctx)

    def _graph_for(self, batch: Batch
                   ) -> tuple[torch.cuda.CUDAGraph, dict[str, torch.Tensor]] | None:
        """The captured graph a decode or verification step replays, padded up to it."""
        ctx = batch.ctx
        if not ctx.is_decode:
            return None
        seqs = ctx.context_lens.shape[0]
        if ctx.rows == 1:
            bs = next((b for b in GRAPH_BATCH_SIZES if b >= seqs), None)
            return self.graphs.get(bs) if bs is not None else None
        bs = next((b for b in VERIFY_BATCH_SIZES if b >= seqs), None)
        return self.verify_graphs.get((bs, ctx.rows)) if bs is not None else None

    def time_steps(self, row_counts: list[int], repeats: int = 3) -> dict[int, float]:
        """Seconds (median of `repeats`) of a one-sequence step of each number of rows, run
        as the engine runs it (graph replays on a GPU) over the scratch block: what the
        speculation cost model starts from instead of a prior (Engine's calibration)."""
        self._bind_cache()
        out: dict[int, float] = {}
        counted = Counter(self.paths)
        for n in row_counts:
            seq = Sequence([0] * n, block_table=[self.scratch_slot // BLOCK_SIZE],
                           local_table=[self.window_null])
            batch = self.prepare([Scheduled(seq, n, draft=n - 1)])
            times = []
            with torch.inference_mode():
                for _ in range(repeats + 1):  # the first one warms up
                    start = time.perf_counter()
                    self.model.logits(self._forward(batch)[batch.sample_rows])
                    if self.device.type == "cuda":
                        torch.cuda.synchronize()
                    times.append(time.perf_counter() - start)
            out[n] = sorted(times[1:])[len(times[1:]) // 2]
        self.paths = counted  # calibration steps are not the engine's
        return out

    # -- CUDA graphs (GPU only; untested on real hardware in this repository's CI) -----------
    def capture_graphs(self, verify: bool = True) -> None:
        """One graph per decode batch size, and one per (batch, rows) of a verification, over
        static input tensors sized for the largest block table; a step pads its batch (and
        its rows) up to the next captured size. All share one memory pool."""
        for bs in reversed(GRAPH_BATCH_SIZES):
            self.graphs[bs] = self._capture(bs, 1)
        if not verify:
            return
        before = torch.cuda.memory_reserved(self.device)
        for bs in reversed(VERIFY_BATCH_SIZES):
            for rows in reversed(VERIFY_ROWS):
                self.verify_graphs[(bs, rows)] = self._capture(bs, rows)
        self.verify_graph_bytes = torch.cuda.memory_reserved(self.device) - before
        self.pad_rows = True

    def _capture(self, bs: int, rows: int
                 ) -> tuple[torch.cuda.CUDAGraph, dict[str, torch.Tensor]]:
        width, n, dev = self.max_blocks_per_seq, bs * rows, self.device
        static = dict(
            input_ids=torch.zeros(n, dtype=torch.long, device=dev),
            positions=torch.zeros(n, dtype=torch.long, device=dev),
            slot_mapping=torch.full((n,), self.scratch_slot, dtype=torch.long, device=dev),
            block_tables=torch.zeros(bs, width, dtype=torch.long, device=dev),
            context_lens=torch.full((bs,), rows, dtype=torch.long, device=dev),
            query_rows=torch.full((bs,), rows, dtype=torch.long, device=dev))
        ctx = Context(static["slot_mapping"], static["block_tables"], static["context_lens"],
                      rows=rows, query_rows=static["query_rows"] if rows > 1 else None)
        if self.window_cache is not None:
            static["local_slot_mapping"] = torch.full(
                (n,), self.window_scratch_slot, dtype=torch.long, device=dev)
            static["local_block_tables"] = torch.full(
                (bs, width), self.window_null, dtype=torch.long, device=dev)
            ctx.local_slot_mapping = static["local_slot_mapping"]
            ctx.local_block_tables = static["local_block_tables"]
        with torch.inference_mode():
            # warm up (and compile: inductor's kernels are captured, not traced)
            self.decode_model(static["input_ids"], static["positions"], ctx)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            first = self.graphs.get(GRAPH_BATCH_SIZES[-1])
            with torch.cuda.graph(graph, pool=first[0].pool() if first else None):
                static["hidden"] = self.decode_model(static["input_ids"], static["positions"],
                                                     ctx)
        return graph, static

    def _replay(self, batch: Batch, graph: torch.cuda.CUDAGraph,
                static: dict[str, torch.Tensor]) -> torch.Tensor:
        n, seqs = batch.input_ids.shape[0], batch.ctx.context_lens.shape[0]
        static["input_ids"].zero_()
        static["slot_mapping"].fill_(self.scratch_slot)
        static["block_tables"].zero_()
        static["context_lens"].fill_(1)
        static["query_rows"].fill_(1)  # a padded sequence: one row at position 0
        static["input_ids"][:n] = batch.input_ids
        static["positions"][:n] = batch.positions
        static["slot_mapping"][:n] = batch.ctx.slot_mapping
        width = batch.ctx.block_tables.shape[1]
        static["block_tables"][:seqs, :width] = batch.ctx.block_tables
        static["context_lens"][:seqs] = batch.ctx.context_lens
        if batch.ctx.query_rows is not None:
            static["query_rows"][:seqs] = batch.ctx.query_rows
        if self.window_cache is not None:
            static["local_slot_mapping"].fill_(self.window_scratch_slot)
            static["local_block_tables"].fill_(self.window_null)
            local_slots, local_tables = batch.ctx.local_slot_mapping, batch.ctx.local_block_tables
            assert local_slots is not None and local_tables is not None  # prepare() made them
            static["local_slot_mapping"][:n] = local_slots
            static["local_block_tables"][:seqs, :width] = local_tables
        graph.replay()
        return static["hidden"][:n]
