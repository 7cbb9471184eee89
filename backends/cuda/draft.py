"""The draft model of speculative decoding: a smaller model with the same tokenizer, on its
own KV blocks and model runner, proposing tokens for every speculating sequence at once.

Each speculating sequence has a shadow sequence here. Before proposing, the shadow is
rolled back to what it shares with the real sequence (proposals the model rejected go) and
given the tokens the model accepted or added; one step computes those (a chunk), then each
further step proposes one token per sequence, batched.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from backends.base import SamplingParams
from backends.cuda.block_manager import BlockManager
from backends.cuda.kv_layout import BLOCK_SIZE
from backends.cuda.model_runner import ModelRunner
from backends.cuda.models.layers import CausalLM
from backends.cuda.rejection import processed_rows
from backends.cuda.scheduler import Scheduled
from backends.cuda.sequence import Sequence

EMA = 0.3  # weight of the newest measurement in the step-time average


def model_bytes(model: CausalLM) -> int:
    """Bytes of its weights (packed int8/int4 weights are buffers, so those count too)."""
    return sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))


class DraftModel:
    def __init__(self, model: CausalLM, path: Path, num_blocks: int, max_blocks_per_seq: int,
                 device: torch.device, dtype: torch.dtype, vocab: int) -> None:
        self.path, self.vocab = path, vocab  # vocab: the model's logits width
        self.blocks = BlockManager(num_blocks)
        self.runner = ModelRunner(model, num_blocks, max_blocks_per_seq, device, dtype,
                                  verify_graphs=False)
        self.max_blocks_per_seq = max_blocks_per_seq
        self.shadows: dict[int, Sequence] = {}  # by id() of the real sequence
        self.step_s: float | None = None  # measured seconds of one proposing step

    @property
    def weight_bytes(self) -> int:
        return model_bytes(self.runner.model)

    def release(self, seq: Sequence) -> None:
        shadow = self.shadows.pop(id(seq), None)
        if shadow is not None:
            self.blocks.free_seq(shadow)

    def _sync(self, seq: Sequence, k: int) -> Sequence | None:
        """The shadow of `seq` holding its tokens, with blocks for k more (None: no room)."""
        shadow = self.shadows.get(id(seq))
        if shadow is None:
            shadow = Sequence(list(seq.tokens))
            if not self.blocks.can_allocate(shadow):
                return None
            self.blocks.allocate(shadow)
            self.shadows[id(seq)] = shadow
        else:
            same = 0
            for a, b in zip(shadow.tokens, seq.tokens, strict=False):
                if a != b:
                    break
                same += 1
            self.blocks.truncate(shadow, same)
            shadow.tokens += seq.tokens[same:]
        self.blocks.register_computed(shadow)  # what it holds now is the real text
        need = -(-(len(shadow) + k) // BLOCK_SIZE)
        if need > self.max_blocks_per_seq or \
                need - len(shadow.block_table) > self.blocks.num_free:
            return None
        self.blocks.ensure_slots(shadow, len(shadow) + k)
        return shadow

    def propose(self, wants: list[tuple[Sequence, int]],
                generator: Callable[[Sequence], torch.Generator],
                ) -> dict[int, tuple[list[int], torch.Tensor | None]]:
        """Up to k proposals for each (sequence, k), by id() of the sequence, with the
        probabilities they were drawn from ((k, vocab); None for greedy requests). A
        sequence the draft has no KV room for gets none."""
        active: list[tuple[Sequence, Sequence, int]] = []
        for seq, k in wants:
            shadow = self._sync(seq, k)
            if shadow is not None:
                active.append((seq, shadow, k))
        out: dict[int, tuple[list[int], list[torch.Tensor]]] = {
            id(seq): ([], []) for seq, _, _ in active}
        catch_up = True
        while active:
            scheduled = [Scheduled(sh, len(sh) - sh.num_computed) for _, sh, _ in active]
            start = time.perf_counter()
            logits = self.runner.run(scheduled)[:, :self.vocab]
            for s in scheduled:
                s.seq.num_computed += s.num_tokens
                if catch_up:  # all real tokens so far: cacheable for the next request
                    self.blocks.register_computed(s.seq)
            catch_up = False
            for (seq, shadow, _), row in zip(active, logits, strict=True):
                tokens, probs = out[id(seq)]
                token, q = self._draw(row, seq.sampling, shadow.tokens, generator(seq))
                shadow.append(token)
                tokens.append(token)
                if q is not None:
                    probs.append(q)
            if self.runner.device.type == "cuda":
                torch.cuda.synchronize()
            if all(s.num_tokens <= 2 for s in scheduled):  # not a long catch-up chunk
                took = time.perf_counter() - start
                self.step_s = took if self.step_s is None else \
                    (1 - EMA) * self.step_s + EMA * took
            active = [a for a in active if len(out[id(a[0])][0]) < a[2]]
        return {key: (tokens, torch.stack(probs) if probs else None)
                for key, (tokens, probs) in out.items()}

    def _draw(self, logits: torch.Tensor, params: SamplingParams, history: list[int],
              generator: torch.Generator) -> tuple[int, torch.Tensor | None]:
        row = processed_rows(logits[None], params, history, [])[0]
        if params.temperature == 0.0:
            return int(row.argmax()), None
        q = torch.zeros(self.vocab)
        q[:row.numel()] = row
        return int(torch.multinomial(q, 1, generator=generator)), q
