"""The memory loaded models share, as the Runtime counts it to decide what to evict: on a
machine with a discrete GPU, GPU memory and RAM are two pools with budgets of their own (a
model offloaded to the GPU holds little RAM, one on the CPU no GPU memory); elsewhere (the
CPU alone, Apple's and integrated GPUs' unified memory) one pool, the RAM. The budgets are the
fit model's (app.fit.base.budgets)."""

from __future__ import annotations

from dataclasses import dataclass

from app.fit.base import budgets, is_discrete, offload_gpus
from app.hardware import GPU, HardwareProfile
from backends.base import LoadPlan

Use = tuple[int, int]  # (GPU bytes, RAM bytes)


@dataclass(frozen=True)
class Pools:
    gpu: int  # the GPU budget; 0 where there is no discrete GPU
    ram: int

    @classmethod
    def of(cls, hw: HardwareProfile) -> Pools:
        gpu, ram, kind = budgets(hw)
        return cls(gpu if is_discrete(kind) else 0, ram)

    def use(self, plan: LoadPlan, drafts: int = 0) -> Use:
        """What a load `plan` holds in each pool, with its draft models' `drafts` bytes on
        the side that holds most of it."""
        if not self.gpu:
            return 0, plan.memory_bytes + drafts
        gpu = min(plan.gpu_memory_bytes, plan.memory_bytes)
        ram = plan.memory_bytes - gpu
        return (gpu + drafts, ram) if gpu > ram else (gpu, ram + drafts)

    def short(self, in_use: Use, needed: Use) -> tuple[str, int, int] | None:
        """The first pool where `needed` does not fit beside `in_use`, as (its name, the
        bytes in use there, its budget); None when both fit."""
        if self.gpu and in_use[0] + needed[0] > self.gpu:
            return "GPU", in_use[0], self.gpu
        if in_use[1] + needed[1] > self.ram:
            return "RAM" if self.gpu else "", in_use[1], self.ram
        return None


def total(uses: list[Use]) -> Use:
    return sum(u[0] for u in uses), sum(u[1] for u in uses)


def devices_of(hw: HardwareProfile, plan: LoadPlan, backend: str) -> tuple[GPU, ...]:
    """The GPUs a load runs on: none where its plan holds no GPU memory; the NVIDIA GPU for
    Ember's cuda engine; else those llama.cpp splits the offloaded layers across (discrete), or
    the unified-memory GPU (Apple's, an integrated one)."""
    if plan.gpu_memory_bytes <= 0:
        return ()
    if backend == "cuda":
        return tuple(g for g in hw.gpus if g.vendor == "nvidia")[:1]
    return offload_gpus(hw) or tuple(g for g in hw.gpus if g.vendor == "apple"
                                     or g.shared_memory)[:1]
