"""The fit model: memory and speed predictions, recommendations, and load plans.

One formula, used before download (which quantization to recommend) and at load time (the
plan the backend gets): memory = weights + KV cache + compute buffers + the worker process,
placed on the GPU, split, on the CPU, or "will not fit"; decode speed from memory bandwidth,
prefill from FLOP/s. Its parts:

- `base`: what a prediction is (Memory, Fit), this machine's budgets, the one load-plan rule;
- `estimate`: engines that run a file's own quantization (llama.cpp; MLX uses it too);
- `offload`: where llama.cpp puts each part with n layers on a discrete GPU, and the plan;
- `mlx`: an MLX directory's numbers and plan; `cuda`: Ember's own engine, which keeps its
  weights in one dtype and its KV cache in blocks (from backends/cuda/kv_layout.py);
- `recommend`: which variant to suggest here; `plan`: the Runtime's load plan per backend.

The formula term by term and where each constant comes from: docs/notes/fit-model.md.
"""

from app.fit.base import GB, Fit, Memory
from app.fit.estimate import estimate, plan_load
from app.fit.plan import plan_for
from app.fit.recommend import fits_for, recommend

__all__ = ["GB", "Fit", "Memory", "estimate", "fits_for", "plan_for",
           "plan_load", "recommend"]
