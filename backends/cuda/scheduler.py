"""Continuous batching: which sequences run in the next step, and how many tokens each.

Every step first gives each decoding sequence its one token (oldest first), then spends the
rest of the token budget on prompt chunks: sequences already part-way through their prompt,
then new ones, admitted while blocks and batch slots last. New requests join between steps
and finished ones leave. When a decode needs a block and none is free, the youngest
sequence is preempted: its blocks are freed (their prefix stays cached) and it goes back to
the front of the queue, to be recomputed from its tokens later.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from backends.cuda.block_manager import BlockManager
from backends.cuda.sequence import Sequence, Status


@dataclass(frozen=True)
class Scheduled:
    seq: Sequence
    num_tokens: int  # tokens computed this step, from seq.num_computed on
    draft: int = 0  # of those, proposed tokens at the end (speculative decoding) to verify

    @property
    def samples(self) -> bool:
        """Whether this step reaches the sequence's last token (and so samples the next)."""
        return self.seq.num_computed + self.num_tokens == len(self.seq)


class Scheduler:
    def __init__(self, blocks: BlockManager, max_seqs: int, max_tokens: int) -> None:
        self.blocks = blocks
        self.max_seqs, self.max_tokens = max_seqs, max_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # oldest first
        self.preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> list[Scheduled]:
        budget = self.max_tokens
        out: list[Scheduled] = []
        for seq in list(self.running):
            if seq.status is not Status.RUNNING or seq.num_computed != len(seq) - 1:
                continue  # preempted above, or still in its prompt
            while not self.blocks.can_append(seq):
                victim = max(self.running, key=lambda s: s.arrival)  # the youngest
                self.preempt(victim)
                if victim is seq:
                    break
            if seq.status is Status.RUNNING:
                self.blocks.ensure_slots(seq, len(seq))
                out.append(Scheduled(seq, 1))
                budget -= 1
        for seq in self.running:
            if budget > 0 and seq.num_computed < len(seq) - 1:
                n = min(len(seq) - seq.num_computed, budget)
                self.blocks.ensure_slots(seq, seq.num_computed + n)
                out.append(Scheduled(seq, n))
                budget -= n
        while (self.waiting and budget > 0 and len(self.running) < self.max_seqs
               and self.blocks.can_allocate(self.waiting[0])):
            seq = self.waiting.popleft()
            self.blocks.allocate(seq)
            if seq.preemptions == 0:
                seq.num_cached = seq.num_computed
            seq.status = Status.RUNNING
            self.running.append(seq)
            self.running.sort(key=lambda s: s.arrival)  # a recomputed one is older than most
            n = min(len(seq) - seq.num_computed, budget)
            self.blocks.ensure_slots(seq, seq.num_computed + n)
            out.append(Scheduled(seq, n))
            budget -= n
        return out

    def preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.blocks.free_seq(seq)
        seq.status = Status.WAITING
        seq.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def postprocess(self, scheduled: list[Scheduled]) -> None:
        """Advance what was computed, and make its full blocks cacheable."""
        for s in scheduled:
            s.seq.num_computed += s.num_tokens
            self.blocks.register_computed(s.seq)

    def finish(self, seq: Sequence) -> None:
        seq.status = Status.FINISHED
        if seq in self.running:
            self.running.remove(seq)
            self.blocks.free_seq(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
