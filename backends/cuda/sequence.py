"""A request inside the engine: its tokens, how many of them the KV cache holds, its blocks."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import Enum

import torch

from backends.base import SamplingParams, SpeculativeParams
from backends.cuda.kv_layout import BLOCK_SIZE
from backends.grammar import Constraint

_arrival = itertools.count()


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Sequence:
    prompt: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_new: int = 512
    tokens: list[int] = field(default_factory=list)  # prompt, then every sampled token
    num_computed: int = 0  # leading tokens whose K/V are in the cache
    num_cached: int = 0  # prompt tokens found in the prefix cache at the first admission
    block_table: list[int] = field(default_factory=list)
    local_table: list[int] = field(default_factory=list)  # sliding-window layers' blocks
    status: Status = Status.WAITING
    arrival: int = field(default_factory=lambda: next(_arrival))  # younger = larger
    preemptions: int = 0
    speculative: SpeculativeParams | None = None  # None: one token per step
    num_drafted: int = 0  # tokens proposed to the model by speculative decoding
    num_accepted: int = 0  # of those, the ones it accepted
    grammar: Constraint | None = None  # constrained decoding: masks each sampled row
    # logprobs: None, or the request wants each token's (with this many top alternatives):
    # the engine then keeps the raw logits row (float32, CPU) of every token it appends in
    # `raw_rows`, in order, until the backend takes them
    logprobs: int | None = None
    raw_rows: list[torch.Tensor] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.tokens:
            self.tokens = list(self.prompt)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def num_prompt(self) -> int:
        return len(self.prompt)

    @property
    def num_output(self) -> int:
        return len(self.tokens) - len(self.prompt)

    @property
    def output(self) -> list[int]:
        return self.tokens[len(self.prompt):]

    @property
    def num_blocks(self) -> int:
        return -(-len(self.tokens) // BLOCK_SIZE)

    def block(self, i: int) -> list[int]:
        return self.tokens[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE]

    def append(self, token: int) -> None:
        self.tokens.append(token)
