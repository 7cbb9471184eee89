"""What this machine has: CPU, cores, ISA flags, memory. (GPUs and Apple chips: issue 3.)"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

import psutil


@dataclass(frozen=True)
class HardwareProfile:
    os: str
    cpu: str
    physical_cores: int
    logical_cores: int
    isa: tuple[str, ...]
    ram_total: int
    ram_available: int


def _cpu_info() -> tuple[str, tuple[str, ...]]:
    brand, flags = platform.processor() or platform.machine(), set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and brand in ("", platform.machine()):
                brand = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
    wanted = ("avx", "avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_int8",
              "amx_bf16", "fma", "f16c", "neon", "asimd")
    return brand, tuple(f for f in wanted if f in flags)


def detect() -> HardwareProfile:
    brand, isa = _cpu_info()
    vm = psutil.virtual_memory()
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    return HardwareProfile(
        os=f"{platform.system()} {platform.release()}", cpu=brand,
        physical_cores=psutil.cpu_count(logical=False) or logical, logical_cores=logical,
        isa=isa, ram_total=vm.total, ram_available=vm.available)
