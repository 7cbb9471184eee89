"""How the Runtime counts loaded models' memory (app/runtime/memory_pools.py): GPU memory
and RAM as two budgets on a machine with a discrete GPU, one elsewhere."""

from __future__ import annotations

from app.hardware import GPU
from app.runtime.memory_pools import Pools, devices_of, total
from backends.base import LoadPlan
from tests.support.machines import M2_AIR_16GB, profile

GiB = 2**30
RTX = GPU("NVIDIA GeForce RTX 4060", "nvidia", 8 * GiB, 8 * GiB, None, 272,
          llama_backend="Vulkan")
DESKTOP = profile(32 * GiB, 24e9, 8, 50, (RTX,))  # RAM budget 21.6 GB
ON_GPU = LoadPlan(context=4096, threads=8, gpu_layers=-1, memory_bytes=6 * 10**9,
                  gpu_memory_bytes=5 * 10**9)
ON_CPU = LoadPlan(context=4096, threads=8, memory_bytes=6 * 10**9)


def test_with_a_discrete_gpu_a_cpu_model_does_not_count_against_the_gpu():
    pools = Pools.of(DESKTOP)
    # 0.95 x 8 GiB - 400 MiB of GPU; 0.9 x 24 GB of RAM
    assert pools == Pools(gpu=7_741_007_462, ram=21_600_000_000)
    assert pools.use(ON_GPU) == (5 * 10**9, 10**9)
    assert pools.use(ON_CPU) == (0, 6 * 10**9)
    # one model on the GPU leaves room for a second one on the CPU, not for a second on the GPU
    in_use = total([pools.use(ON_GPU)])
    assert pools.short(in_use, pools.use(ON_CPU)) is None
    assert pools.short(in_use, pools.use(ON_GPU)) == ("GPU", 5 * 10**9, 7_741_007_462)
    three_on_cpu = total([pools.use(ON_CPU)] * 3)
    assert pools.short(three_on_cpu, pools.use(ON_CPU)) == ("RAM", 18 * 10**9, 21_600_000_000)


def test_draft_models_count_where_most_of_their_model_is():
    pools = Pools.of(DESKTOP)
    assert pools.use(ON_GPU, drafts=10**9) == (6 * 10**9, 10**9)
    assert pools.use(ON_CPU, drafts=10**9) == (0, 7 * 10**9)


def test_unified_memory_and_the_cpu_alone_are_one_pool():
    for hw in (M2_AIR_16GB, profile(32 * GiB, 24e9, 8, 50)):
        pools = Pools.of(hw)
        assert pools.gpu == 0
        assert pools.use(ON_GPU) == (0, 6 * 10**9)
        assert pools.short((0, pools.ram - 1), pools.use(ON_CPU))[0] == ""


def test_the_gpus_a_load_runs_on():
    assert devices_of(DESKTOP, ON_GPU, "llamacpp") == (RTX,)
    assert devices_of(DESKTOP, ON_CPU, "llamacpp") == ()
    two = profile(32 * GiB, 24e9, 8, 50, (RTX, RTX))
    assert devices_of(two, ON_GPU, "llamacpp") == (RTX, RTX)  # llama.cpp's layer split
    assert devices_of(two, ON_GPU, "cuda") == (RTX,)
    assert [g.vendor for g in devices_of(M2_AIR_16GB, ON_GPU, "mlx")] == ["apple"]
