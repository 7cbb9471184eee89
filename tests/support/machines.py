"""Simulated machines for the fit model and backend choice, and Llama 3.1 8B Instruct (32
layers, 8 KV heads of 128, vocabulary 128,256) in four GGUF sizes, whose numbers
tests/unit/test_fit.py works out by hand."""

from __future__ import annotations

from app.hardware import GPU, HardwareProfile
from app.registry import Arch, ModelSpec, Source, Variant

GiB = 2**30
LLAMA_8B_ARCH = Arch(type="llama", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128,
                     vocab=128256, ffn=14336)
SIZES = {"Q4_K_M": 4_919_000_000, "Q5_K_M": 5_722_000_000, "Q6_K": 6_585_000_000,
         "Q8_0": 8_532_000_000}
LLAMA_8B = ModelSpec(
    id="llama-3.1-8b-instruct", family="llama3.1", name="Llama 3.1 8B", description="",
    license="llama3.1", params=8_030_261_248, context_default=4096, context_max=131072,
    chat=True, arch=LLAMA_8B_ARCH,
    variants=tuple(Variant("gguf", q, f"x-{q}.gguf", n, None, (Source("hf", "r/x", "f"),))
                   for q, n in SIZES.items()))


def profile(ram_total: int, ram_available: float, cores: int, cpu_bw: float,
            gpus: tuple[GPU, ...] = (), chip: str | None = None,
            isa: tuple[str, ...] = ("avx2",)) -> HardwareProfile:
    return HardwareProfile(os="test", machine="x86_64", cpu="test", physical_cores=cores,
                           logical_cores=cores, isa=isa, ram_total=ram_total,
                           ram_available=int(ram_available), gpus=gpus, apple_chip=chip,
                           cpu_bandwidth_gbps=cpu_bw)


def desktop(**kw: object) -> HardwareProfile:
    """An 8-core x86-64 desktop with 32 GiB, `kw` changed."""
    base = dict(os="test", machine="x86_64", cpu="test", physical_cores=8, logical_cores=16,
                isa=("avx2",), ram_total=32 * 2**30, ram_available=28 * 2**30)
    return HardwareProfile(**{**base, **kw})  # type: ignore[arg-type]


LAPTOP_8GB = profile(8 * GiB, 6.5e9, 4, 38.4)
M2_AIR_16GB = profile(16 * GiB, 12e9, 8, 100,
                      (GPU("Apple M2 GPU", "apple", int(16 * GiB * 0.67), int(16 * GiB * 0.67),
                           None, 100),), chip="M2", isa=("neon",))
RTX_4090 = profile(64 * GiB, 60e9, 16, 60,
                   (GPU("NVIDIA GeForce RTX 4090", "nvidia", 24 * GiB, 25_000_000_000, "8.9",
                        1008),))
SBC_4GB = profile(4 * GiB, 3.2e9, 4, 17, isa=("neon",))
GPU_6GB = profile(16 * GiB, 12e9, 8, 40,
                  (GPU("NVIDIA GeForce RTX 3060 Laptop GPU", "nvidia", 6 * GiB, 5_800_000_000,
                       "8.6", 360),))
