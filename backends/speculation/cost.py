"""The cost model of speculative decoding: how many tokens to propose, from measured step
times and the request's acceptance.

    tokens a step yields   E(k) = 1 + a + a^2 + ... + a^k     (a: the request's acceptance)
    what the step costs    T(rows + k) + k * t_draft          (T: the model's step time)

Over a batch of B decoding sequences, proposing k for one of them is worth it when
(B - 1 + E(k)) / cost(k) beats B / T(rows) by MIN_GAIN; the best k wins, k = 0 decodes
plainly. T is measured on the running engine by the step's number of rows, so the choice
adapts to the machine (on a CPU one more row is far from free; on a GPU it nearly is).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# One more row, as a share of a one-row step, until two sizes are measured (llama-bench for
# the 1.5B Q4_K_M on the 2-core CPU: 4 rows for 1.6x of one; the cuda engine's 0.5B in
# float32 on one thread: 5 rows for 1.6x).
PRIOR_ROW_COST = 0.2
TIMING_EMA = 0.2  # weight of the newest measurement in a step time's moving average
MIN_GAIN = 1.05  # speculate only where the model predicts at least this speedup
# A draft model's step as a share of the model's, until measured; and a token it catches up
# on (a new prompt, evaluated in a batch) as a share of its step.
PRIOR_DRAFT_STEP = 0.3
PRIOR_CATCH_UP_TOKEN = 0.25
# The acceptance before a request has evidence: 3 accepted and 2 rejected proposals (a = 0.6),
# optimistic enough that every request tries, then decaying as its own counts come in.
PRIOR_ACCEPTED, PRIOR_REJECTED = 3.0, 2.0
ACCEPTANCE_DECAY = 0.9  # per verification: the estimate follows the text as it changes


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens one verification of `k` proposals yields when each holds with `acceptance`
    (the accepted run, plus the model's own token after it)."""
    return sum(acceptance ** i for i in range(k + 1))


@dataclass
class StepTimes:
    """Measured seconds of the model's decode/verify steps by their number of rows (moving
    averages)."""
    rows: dict[int, float] = field(default_factory=dict)

    @property
    def measured(self) -> bool:
        return bool(self.rows)

    def seed(self, seconds_by_rows: dict[int, float]) -> None:
        """Start from these step times (measured at start, or configured) instead of the
        prior; steps as they run then move them like any measurement."""
        for n_rows, seconds in seconds_by_rows.items():
            if n_rows < 1 or seconds <= 0:
                raise ValueError(f"a step of {n_rows} rows cannot take {seconds} s")
            self.rows[n_rows] = seconds

    def record(self, n_rows: int, seconds: float) -> None:
        old = self.rows.get(n_rows)
        self.rows[n_rows] = seconds if old is None else \
            (1 - TIMING_EMA) * old + TIMING_EMA * seconds

    def cost(self, n_rows: int) -> float:
        """The time of a step of `n_rows` rows: measured, or interpolated between the nearest
        measured sizes, or extrapolated from the nearest one with the prior slope; before any
        measurement, in units of a one-row step. Not a line through all sizes: the matrix
        kernels change with the row count (ggml's repacked kernels work in blocks of 4 and 16
        rows; measured for the 1.5B on one thread in torch: 1-3 rows cost about the same, 4
        about twice that)."""
        if n_rows in self.rows:
            return self.rows[n_rows]
        if not self.rows:
            return 1.0 + PRIOR_ROW_COST * (n_rows - 1)
        below = [r for r in self.rows if r < n_rows]
        above = [r for r in self.rows if r > n_rows]
        if below and above:
            lo, hi = max(below), min(above)
            f = (n_rows - lo) / (hi - lo)
            return self.rows[lo] * (1 - f) + self.rows[hi] * f
        near = max(below) if below else min(above)
        one_row = self.rows[near] / (1 + PRIOR_ROW_COST * (near - 1))
        return one_row * (1 + PRIOR_ROW_COST * (n_rows - 1))


@dataclass
class Acceptance:
    """How often a request's proposals hold: decaying counts of accepted proposals and of
    rejections, starting from the prior."""
    accepted: float = PRIOR_ACCEPTED
    rejected: float = PRIOR_REJECTED

    @property
    def rate(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    def observe(self, proposed: int, accepted: int) -> None:
        """A verification of `proposed` tokens kept `accepted` of them (stopping at the first
        rejection): `accepted` successes, and one failure unless all were kept (the proposals
        after a rejection were never judged)."""
        self.accepted = ACCEPTANCE_DECAY * self.accepted + accepted
        self.rejected = ACCEPTANCE_DECAY * self.rejected + (1 if accepted < proposed else 0)


@dataclass(frozen=True)
class DraftCost:
    """What a draft model's proposals cost beyond the model's step: `step_s` per proposed
    token (None: not measured yet), and first catching up on `catch_up` tokens it has not
    seen (a new prompt), `catch_up_token_s` each (None: not measured yet)."""
    step_s: float | None = None
    catch_up: int = 0
    catch_up_token_s: float | None = None

    def seconds(self, plain_step_s: float) -> tuple[float, float]:
        """(one proposing step, the catch-up), with the priors where not measured."""
        step = self.step_s if self.step_s is not None else PRIOR_DRAFT_STEP * plain_step_s
        per_token = (self.catch_up_token_s if self.catch_up_token_s is not None
                     else PRIOR_CATCH_UP_TOKEN * step)
        return step, self.catch_up * per_token


def step_gain(acceptance: float, k: int, batch: int, rows: int, times: StepTimes,
              draft_step_s: float = 0.0) -> float:
    """The batch's tokens per second with `k` proposals for one of its `batch` sequences,
    over its tokens per second without (`rows`: the step's rows before them)."""
    plain = times.cost(rows)
    cost = times.cost(rows + k) + k * draft_step_s
    return (batch - 1 + expected_tokens(acceptance, k)) / cost * plain / batch


def best_draft_length(acceptance: float, max_k: int, batch: int, rows: int, times: StepTimes,
                      draft_step_s: float = 0.0, remaining: int | None = None,
                      catch_up_s: float = 0.0) -> int:
    """The k in 0..max_k that maximizes the step's tokens per second, where it beats plain
    decoding by MIN_GAIN (0: decode plainly). With a draft that must first catch up
    (`catch_up_s`), the time saved over the `remaining` tokens must also pay for that."""
    plain = times.cost(rows)
    best_k, best_gain = 0, MIN_GAIN
    for k in range(1, max_k + 1):
        gain = step_gain(acceptance, k, batch, rows, times, draft_step_s)
        if remaining is not None:
            saved = remaining * plain * (1 - 1 / gain) if gain > 1 else 0.0
            if saved <= catch_up_s:
                continue
        if gain > best_gain:
            best_k, best_gain = k, gain
    return best_k
