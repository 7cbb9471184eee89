"""EngineConfig.compile: decode steps through torch.compile (inductor) give the tokens the
eager model gives. On the CPU inductor compiles C++ (about 2-3 minutes here for this tiny
model, hence the integration tier); on a GPU the compiled step is captured in CUDA graphs."""

from __future__ import annotations

import torch

from backends.cuda.engine import Engine, EngineConfig
from backends.cuda.models import build_model
from tests.unit.test_cuda_fuse import TINY, separate_tensors


def test_compiled_decode_steps_make_the_eager_tokens():
    model = build_model(TINY)
    model.load_weights(separate_tensors(TINY))
    model.eval()
    prompts = [[5, 17, 99, 4, 250, 31, 8], [7, 8]]

    def run(compile: bool) -> list[list[int]]:
        config = EngineConfig(context=64, max_seqs=2, max_tokens=64, compile=compile)
        return Engine(model, config, torch.device("cpu"), torch.float32).generate(prompts, 6)

    compiled = Engine(model, EngineConfig(context=64, max_seqs=2, max_tokens=64, compile=True),
                      torch.device("cpu"), torch.float32)
    assert compiled.runner.decode_model is not model  # the compiled wrapper runs decodes
    assert run(True) == run(False)
