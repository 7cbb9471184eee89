"""The engine loop on token ids: add sequences, step them all forward together.

`step()` = schedule -> propose (speculative decoding) -> run the model -> sample or verify
-> advance; the Backend adapter (backend.py) turns sequences into requests, text and stats.
`generate` is the plain loop tests and benchmarks use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from backends.base import SamplingParams, SpeculativeParams
from backends.cuda.block_manager import BlockManager
from backends.cuda.draft import DraftModel, model_bytes
from backends.cuda.kv_layout import (
    VERIFY_ROWS,
    blocks_per_context,
    blocks_per_seq,
    global_blocks,
)
from backends.cuda.model_config import ModelConfig
from backends.cuda.model_runner import ModelRunner
from backends.cuda.models.layers import CausalLM
from backends.cuda.sampler import Sampler
from backends.cuda.scheduler import Scheduled, Scheduler
from backends.cuda.sequence import Sequence
from backends.cuda.speculative import Speculator

GREEDY = SamplingParams(temperature=0.0)


@dataclass(frozen=True)
class EngineConfig:
    context: int = 4096  # tokens one sequence may hold
    max_seqs: int = 8  # sequences decoded together
    max_tokens: int = 512  # tokens per step (prompt chunks + decodes)
    num_blocks: int | None = None  # None: room for max_seqs full contexts
    # speculative decoding: False proposes max_draft tokens every step, even where the cost
    # model says it is slower (to measure it, and to test the verification)
    adaptive_speculation: bool = True
    # sliding-window layers keep only their window's blocks (window_blocks.py); False puts
    # them on the global table like every other layer (a reference for tests)
    window_pool: bool = True
    # on a GPU, decode steps of up to 64 sequences replay captured CUDA graphs; False runs
    # them eagerly (to measure what the graphs save, and to check they change nothing)
    cuda_graphs: bool = True
    # the speculation cost model's step times by rows (1 = a decode, 1 + k = a verification
    # of k proposals): measured at start (None: on a GPU, where verification runs through its
    # own graphs and costs what those replays cost), or configured as (rows, seconds) pairs;
    # otherwise the cost model starts from its prior and measures as steps run
    calibrate_speculation: bool | None = None
    step_times: tuple[tuple[int, float], ...] = ()
    # decode steps through torch.compile (inductor: fuses the elementwise work between the
    # matmuls, e.g. SiLU * up and residual + RMSNorm), captured in the CUDA graphs on a GPU;
    # off until the GPU measures that it pays (benchmarks/engine.py --compile compare)
    compile: bool = False


def window_pool_size(model: ModelConfig, config: EngineConfig, per_seq: int) -> tuple[int, int]:
    """(window, blocks) of the sliding-window layers' own pool; (0, 0) when the model has no
    such layers or its window is no smaller than a whole context (nothing to give back)."""
    if not config.window_pool or not any(model.is_sliding(i) for i in range(model.num_layers)):
        return 0, 0
    local = blocks_per_seq(model.sliding_window, config.max_tokens)
    if local >= per_seq:
        return 0, 0
    return model.sliding_window, local * config.max_seqs


def keep_raw_rows(seq: Sequence, rows: torch.Tensor) -> None:
    """The model's rows for the tokens `seq` gets this step (one each; with speculation the
    target's verification rows), before any grammar, penalty or sampling setting, for a
    sequence whose request asked for logprobs. Row i is the distribution token i was drawn
    from: the verified proposals and the token after them all come from the target."""
    if seq.logprobs is not None:
        seq.raw_rows += list(rows.float().cpu())


class Engine:
    def __init__(self, model: CausalLM, config: EngineConfig, device: torch.device,
                 dtype: torch.dtype, is_eog: Callable[[int], bool] = lambda t: False) -> None:
        per_seq = blocks_per_context(config.context)
        num_blocks = config.num_blocks or global_blocks(config.context, config.max_seqs)
        if num_blocks < per_seq:
            raise ValueError(f"{num_blocks} KV blocks cannot hold one {config.context}-token "
                             "context")
        self.config, self.is_eog = config, is_eog
        window, window_blocks = window_pool_size(model.config, config, per_seq)
        self.blocks = BlockManager(num_blocks, window, window_blocks)
        self.scheduler = Scheduler(self.blocks, config.max_seqs, config.max_tokens)
        self.runner = ModelRunner(model, num_blocks, per_seq, device, dtype, window_blocks,
                                  graphs=config.cuda_graphs, compile=config.compile)
        self.sampler = Sampler()
        self.speculator = Speculator(self.blocks, config.context, self.sampler,
                                     model_bytes(model), config.adaptive_speculation)
        calibrate = config.calibrate_speculation
        if config.step_times:
            self.speculator.times.seed(dict(config.step_times))
        elif calibrate or (calibrate is None and device.type == "cuda"):
            self.speculator.times.seed(
                self.runner.time_steps(list(range(1, VERIFY_ROWS[-1] + 1))))

    def use_draft(self, model: CausalLM | None, path: Path | str = "draft") -> None:
        """Propose with `model` (same tokenizer; None: no draft model). Its KV blocks match
        ours, plus room for every sequence's proposals."""
        if self.speculator.draft is not None:
            for seq in list(self.scheduler.running) + list(self.scheduler.waiting):
                self.speculator.draft.release(seq)
        if model is None:
            self.speculator.draft = None
            return
        per_seq = blocks_per_context(self.config.context)
        num_blocks = len(self.blocks.blocks) + self.config.max_seqs * 2
        self.speculator.draft = DraftModel(model, Path(path), num_blocks, per_seq,
                                           self.runner.device, self.runner.dtype,
                                           self.runner.model.config.vocab_size)
        self.speculator.draft.runner.threads = self.runner.threads  # not a decode's one

    def add(self, seq: Sequence) -> None:
        if len(seq) >= self.config.context:
            raise ValueError(f"{len(seq)} tokens do not fit a {self.config.context}-token "
                             "context")
        if seq.speculative is not None and seq.speculative.method == "draft" and \
                self.speculator.draft is None:
            raise ValueError("speculative decoding with a draft model, but none is loaded "
                             "(Engine.use_draft)")
        self.scheduler.add(seq)

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def step(self) -> list[tuple[Sequence, int]]:
        """One forward pass; returns the tokens the sampling sequences got (already
        appended), in order: one each, or several for a sequence whose proposals held."""
        scheduled = self.scheduler.schedule()
        if not scheduled:
            return []
        scheduled = self.speculator.propose(scheduled)
        start = time.perf_counter()
        logits = self.runner.run(scheduled)
        if self.runner.device.type == "cuda":
            torch.cuda.synchronize()
        self.speculator.record(scheduled, time.perf_counter() - start)
        plain, plain_rows, out, row = [], [], [], 0
        for i, s in enumerate(scheduled):
            if not s.samples:
                continue
            if s.draft:
                tokens, scheduled[i] = self.speculator.verify(
                    s, logits[row:row + 1 + s.draft], self.is_eog)
                keep_raw_rows(s.seq, logits[row:row + len(tokens)])
                out += [(s.seq, t) for t in tokens]
            else:
                plain.append(s.seq)
                plain_rows.append(row)
            row += 1 + s.draft
        self.scheduler.postprocess(scheduled)
        if plain:
            for seq, r in zip(plain, plain_rows, strict=True):
                keep_raw_rows(seq, logits[r:r + 1])
            tokens = self.sampler(logits[plain_rows], [s.sampling for s in plain],
                                  [s.tokens for s in plain], [id(s) for s in plain],
                                  [s.grammar for s in plain])
            for seq, token in zip(plain, tokens, strict=True):
                seq.append(token)
                if seq.grammar is not None and not self.is_eog(token):
                    seq.grammar.accept(token)
                self.speculator.decoded_plainly(seq, token)
                out.append((seq, token))
        return out

    def finish(self, seq: Sequence) -> None:
        self.scheduler.finish(seq)
        self.sampler.forget(id(seq))
        self.speculator.forget(seq)

    def finish_all(self) -> list[Sequence]:
        seqs = list(self.scheduler.running) + list(self.scheduler.waiting)
        for seq in seqs:
            self.finish(seq)
        return seqs

    def generate(self, prompts: list[list[int]], max_new: int, params: SamplingParams = GREEDY,
                 speculative: SpeculativeParams | None = None) -> list[list[int]]:
        """Every prompt to `max_new` tokens (or end of generation), batched; the outputs."""
        return [s.output for s in self.generate_seqs(prompts, max_new, params, speculative)]

    def generate_seqs(self, prompts: list[list[int]], max_new: int,
                      params: SamplingParams = GREEDY,
                      speculative: SpeculativeParams | None = None) -> list[Sequence]:
        seqs = [Sequence(list(p), params, max_new, speculative=speculative) for p in prompts]
        for seq in seqs:
            self.add(seq)
        while any(s.status.value != "finished" for s in seqs):
            for seq, token in self.step():
                if seq.status.value == "finished":
                    continue
                if seq.num_output >= seq.max_new or self.is_eog(token) or \
                        len(seq) >= self.config.context:
                    self.finish(seq)
        return seqs

    def score(self, tokens: list[int]) -> torch.Tensor:
        """Next-token logits (float32) after every prefix of `tokens`, (len, vocab): the
        teacher-forced view tests compare with llama.cpp. Runs in `max_tokens` chunks over
        fresh blocks (no prefix cache), between steps of any other work."""
        seq = Sequence(list(tokens))
        window = self.blocks.window
        if self.blocks.num_free < seq.num_blocks or len(seq) > self.config.context or (
                window is not None and window.pool.num_free
                < blocks_per_seq(window.window, self.config.max_tokens)):
            raise ValueError(f"no room to score {len(seq)} tokens")
        self.blocks.allocate(seq, use_cache=False)
        rows = []
        try:
            while seq.num_computed < len(seq):
                step = Scheduled(seq, min(self.config.max_tokens, len(seq) - seq.num_computed))
                self.blocks.ensure_slots(seq, seq.num_computed + step.num_tokens)
                rows.append(self.runner.run([step], every_row=True))
                seq.num_computed += step.num_tokens
                self.blocks.register_computed(seq)  # slides the window's blocks
        finally:
            self.blocks.free_seq(seq)
        return torch.cat(rows)
