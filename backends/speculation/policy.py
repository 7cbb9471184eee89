"""One request's speculative decoding: how many tokens to propose at each step, and when to
stop proposing and try again.

The cost model (cost.py) promises a gain from the acceptance so far and the measured step
times; `Speculation` also checks that promise against what the request's speculative steps
really gave (tokens over the seconds spent proposing and verifying). When no length pays, or
the real gain falls below plain decoding, the request decodes plainly, and keeps measuring:
prompt lookup by checking its guess against each plainly decoded token (free), a draft model
by probing with one token now and then. After 8 plain steps it tries again, then after 16,
32, ... while the tries fall short, and after 8 again once a try pays: a few rejections
where an edit departs from the copied text must not switch speculation off for the rest of
the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from backends.base import SpeculativeParams
from backends.speculation.cost import (
    Acceptance,
    DraftCost,
    StepTimes,
    best_draft_length,
)
from backends.speculation.ngram import NgramIndex

RETRY_AFTER = 8  # plain steps before speculation that was off tries again, at first
MAX_RETRY_AFTER = 128  # ... doubling after each try that did not pay
REALIZED_AFTER = 3  # speculative steps measured before their real gain can switch it off
MAX_ACCEPTANCE = 0.99  # an estimate from a few decayed counts is never a certainty


@dataclass
class Speculation:
    """One request's speculative state: its prompt lookup index (method "lookup"), its
    acceptance, what its speculative steps gave, its off/retry count, and its totals."""
    params: SpeculativeParams
    lookup: NgramIndex | None = None
    acceptance: Acceptance = field(default_factory=Acceptance)
    remaining: int = 0  # tokens the request may still produce (the engine sets it)
    # totals for Stats, counted by the engine as it proposes and keeps tokens (a request
    # can end in the middle of a verification)
    proposed: int = 0
    accepted: int = 0
    off_steps: int = 0  # plain steps since speculation last ran or tried
    retry_after: int = RETRY_AFTER
    guess: int | None = None  # prompt lookup's guess for the token being decoded plainly
    # what speculative steps really gave, decaying sums: the check on the cost model
    got_tokens: float = 0.0
    got_seconds: float = 0.0
    measured_steps: int = 0

    @classmethod
    def start(cls, params: SpeculativeParams, prompt: list[int]) -> Speculation:
        """A request's speculation; prompt lookup indexes the prompt."""
        return cls(params, lookup=NgramIndex(prompt) if params.method == "lookup" else None)

    @property
    def uses_draft(self) -> bool:
        return self.params.method == "draft"

    def choose(self, limit: int, times: StepTimes, batch: int = 1, rows: int = 1,
               draft: DraftCost | None = None) -> int:
        """How many tokens to propose now (0: decode plainly). `limit`: the most the request
        may still produce and its context hold; `batch`: the sequences decoding in this step,
        `rows` its rows before this request's proposals; `draft`: a draft model's costs."""
        k = self._choose(limit, times, batch, rows, draft or DraftCost())
        if k == 0 and self.lookup is not None:
            guess = self.lookup.propose(1)
            self.guess = guess[0] if guess else None
        return k

    def _choose(self, limit: int, times: StepTimes, batch: int, rows: int,
                draft: DraftCost) -> int:
        limit = min(limit, self.params.max_draft)
        if limit <= 0:
            return 0
        if not self.params.adaptive:
            return limit
        plain = times.cost(rows)
        draft_step_s = catch_up_s = 0.0
        if self.uses_draft:
            draft_step_s, catch_up_s = draft.seconds(plain)
        best_k = best_draft_length(min(self.acceptance.rate, MAX_ACCEPTANCE), limit, batch,
                                   rows, times, draft_step_s, self.remaining, catch_up_s)
        realized = self.realized_gain(plain) if times.measured else None
        if realized is not None and realized < 1.0:
            best_k = 0  # the model promised more than the steps gave: decode plainly
        if best_k:
            self.off_steps = 0
            if realized is not None:  # measured to pay: try again soon when it stops
                self.retry_after = RETRY_AFTER
            return best_k
        self.off_steps += 1
        # try again now and then, less often each time it does not pay: forget what the
        # last speculative steps gave, and probe a draft model with one token (prompt
        # lookup needs no probe: its guess is checked against each plain token)
        if self.off_steps >= self.retry_after and (not self.uses_draft or catch_up_s < plain):
            self.off_steps = 0
            self.retry_after = min(2 * self.retry_after, MAX_RETRY_AFTER)
            self.got_tokens = self.got_seconds = 0.0
            self.measured_steps = 0
            return 1 if self.uses_draft else 0
        return 0

    def decoded_plainly(self, token: int) -> None:
        """The token a step without proposals gave: prompt lookup's guess for it counts as a
        verified proposal of one."""
        if self.guess is not None:
            self.observe(1, int(token == self.guess))
            self.guess = None

    def observe(self, proposed: int, accepted: int) -> None:
        """A verification kept `accepted` of `proposed` tokens."""
        self.acceptance.observe(proposed, accepted)

    def realize(self, tokens: int, seconds: float) -> None:
        """A speculative step gave the request `tokens` in `seconds` (proposing, catching a
        draft up, verifying)."""
        self.got_tokens = 0.8 * self.got_tokens + tokens
        self.got_seconds = 0.8 * self.got_seconds + seconds
        self.measured_steps += 1

    def realized_gain(self, plain_step_s: float) -> float | None:
        """Tokens per plain step's time that speculation really gave, once measured."""
        if self.measured_steps < REALIZED_AFTER or self.got_seconds <= 0:
            return None
        return self.got_tokens / self.got_seconds * plain_step_s
