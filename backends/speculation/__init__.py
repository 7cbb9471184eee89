"""Speculative decoding's engine-agnostic half, shared by the llama.cpp, MLX and cuda backends.

A proposer guesses the next few tokens; the model checks them all in one forward pass and keeps
those it would have produced itself. What does not depend on the engine lives here, one job
per module:

- `ngram.py`: prompt lookup, the proposer that needs no second model.
- `cost.py`: measured step times, the acceptance estimate, and the draft length that pays.
- `policy.py`: one request's speculation: when to propose, switching off when the steps do
  not pay, and trying again after 8, 16, 32, ... plain steps.
- `vocab.py`: whether a draft model's token ids mean what the model's do.

Each backend keeps what is its own: how it runs a step with the proposals in it, how it
verifies them (greedy match, or rejection sampling), and its draft model.
"""
