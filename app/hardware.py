"""What this machine has: CPU and ISA, RAM, NVIDIA GPUs, Apple Silicon, memory bandwidth.

Works with none of the optional packages: NVIDIA GPUs are read from `nvidia-smi` (or torch
when it is installed), Apple chips from `sysctl`, every GPU llama.cpp can use from its own
backends. Bandwidth comes from a table for GPUs and Apple chips, else from a copy measured on
the GPU (app.gpu_copy_readings), and for the CPU from a quick measurement, cached in the
data dir.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path

import psutil

from app import config
from app.gpu_copy_readings import best_reading

# Peak memory bandwidth in GB/s (vendor specifications).
GPU_BANDWIDTH_GBPS = {
    "H200": 4800, "H100 SXM": 3350, "H100 80GB HBM3": 3350, "H100 PCIe": 2000, "H100": 3350,
    "A100-SXM4-80GB": 2039, "A100 80GB": 1935, "A100": 1555, "L40S": 864, "L4": 300,
    "A10G": 600, "A10": 600, "T4": 320, "V100": 900, "RTX A6000": 768,
    "RTX 6000 Ada": 960, "RTX 5090": 1792, "RTX 5080": 960, "RTX 5070": 672,
    "RTX 4090": 1008, "RTX 4080": 717, "RTX 4070 Ti": 504, "RTX 4070": 504,
    "RTX 4060 Ti": 288, "RTX 4060": 272, "RTX 3090": 936, "RTX 3080": 760,
    "RTX 3070": 448, "RTX 3060": 360, "RTX 2080 Ti": 616, "GTX 1660": 192,
    "RX 9070 XT": 640, "RX 9070": 640, "RX 9060 XT": 320, "RX 7900 XTX": 960,
    "RX 7900 XT": 800, "RX 7900 GRE": 576, "RX 7800 XT": 624, "RX 7700 XT": 432,
    "RX 7600 XT": 288, "RX 7600": 288, "RX 6900 XT": 512, "RX 6800 XT": 512, "RX 6800": 512,
    "RX 6700 XT": 384, "RX 6600 XT": 256, "RX 6600": 224,
    "Arc B580": 456, "Arc B570": 380, "Arc A770": 560, "Arc A750": 512, "Arc A580": 512,
}
# (unified-memory bandwidth GB/s, GPU cores of the common configuration)
APPLE_CHIPS = {
    "M1": (68, 8), "M1 Pro": (200, 16), "M1 Max": (400, 32), "M1 Ultra": (800, 64),
    "M2": (100, 10), "M2 Pro": (200, 19), "M2 Max": (400, 38), "M2 Ultra": (800, 76),
    "M3": (100, 10), "M3 Pro": (150, 18), "M3 Max": (400, 40), "M3 Ultra": (819, 80),
    "M4": (120, 10), "M4 Pro": (273, 20), "M4 Max": (546, 40),
}
# Vulkan's maxStorageBufferRange where it is small enough to keep a model's output layer off
# the GPU (ggml-vulkan refuses an op on a larger tensor): Mesa's lavapipe, 134,217,728 in
# vulkaninfo (Mesa 22.3). Discrete GPUs' drivers give 4 GiB (NVIDIA, RADV, ANV). ggml does
# not report it (its buffer-type maximum is the allocation size: 1 GiB on lavapipe).
MAX_STORAGE_BUFFER = {"lavapipe": 128 << 20}
DEFAULT_CPU_BANDWIDTH_GBPS = 20.0
# A bandwidth measured while other programs used this share of the machine's CPU time or more
# is provisional: they compete for the memory bus (a first start beside a compile read 15 GB/s
# on a machine that reads 29 idle, issue 35). It is measured again once the machine is idle.
BUSY_SHARE = 0.25
IDLE_SAMPLE_S = 0.1  # how long a later start watches the CPU before measuring again


@dataclass(frozen=True)
class GPU:
    name: str
    vendor: str  # "nvidia" | "amd" | "intel" | "apple" | "lavapipe" (Mesa's CPU Vulkan) | "other"
    vram_total: int
    vram_free: int
    compute_capability: str | None = None
    bandwidth_gbps: float | None = None
    # the llama.cpp backend that runs it ("Vulkan", "CUDA", "Metal"); None: not asked
    llama_backend: str | None = None
    shared_memory: bool = False  # an integrated GPU: its memory is the system's RAM
    # the largest tensor an op may touch (Vulkan's maxStorageBufferRange), where it binds
    max_tensor_bytes: int | None = None
    # the best GB/s a device-to-device copy reached on it (app.gpu_copy_readings), and when
    copy_gbps: float | None = None
    copy_measured_at: str | None = None

    def bandwidth_text(self) -> str:
        """"4800 GB/s (table; a copy on it measured 4012 GB/s, 2026-11-29 01:30)", or
        where no table knows the card, the copy's figure, which the fit model then uses."""
        when = (self.copy_measured_at or "")[:16].replace("T", " ")
        copy = f"a copy on it, measured {when}"
        if self.bandwidth_gbps is None:
            return ""
        if self.copy_gbps is None:
            return f"{self.bandwidth_gbps:.0f} GB/s (table)"
        if self.bandwidth_gbps == self.copy_gbps:
            return f"{self.bandwidth_gbps:.0f} GB/s ({copy})"
        return (f"{self.bandwidth_gbps:.0f} GB/s (table; {copy}: "
                f"{self.copy_gbps:.0f} GB/s)")


@dataclass(frozen=True)
class HardwareProfile:
    os: str
    machine: str
    cpu: str
    physical_cores: int
    logical_cores: int
    isa: tuple[str, ...]
    ram_total: int
    ram_available: int
    gpus: tuple[GPU, ...] = ()
    apple_chip: str | None = None
    cpu_bandwidth_gbps: float = DEFAULT_CPU_BANDWIDTH_GBPS
    bandwidth_source: str = "default"  # "measured" | "table" | "default"
    bandwidth_measured_at: str | None = None  # when "measured": ISO 8601, local time
    bandwidth_others_busy: float | None = None  # other programs' CPU share meanwhile, 0..1
    notes: tuple[str, ...] = field(default_factory=tuple)
    torch_cuda: str | None = None  # torch's version when torch.cuda works here (cuda backend)

    @property
    def unified_memory(self) -> bool:
        return self.apple_chip is not None

    @property
    def has_nvidia(self) -> bool:
        return any(g.vendor == "nvidia" for g in self.gpus)

    @property
    def bandwidth_provisional(self) -> bool:
        """Measured while the machine was busy: probably low, measured again when idle."""
        return (self.bandwidth_others_busy or 0.0) >= BUSY_SHARE

    def bandwidth_text(self) -> str:
        """"29 GB/s (measured 2026-11-27 23:17)", and why a figure may be low."""
        text = f"{self.cpu_bandwidth_gbps:.0f} GB/s"
        if self.bandwidth_source != "measured" or self.bandwidth_measured_at is None:
            return f"{text} ({self.bandwidth_source})"
        when = self.bandwidth_measured_at[:16].replace("T", " ")
        if not self.bandwidth_provisional:
            return f"{text} (measured {when})"
        return (f"{text} (measured {when} while other programs used "
                f"{100 * (self.bandwidth_others_busy or 0):.0f}% of the CPU, so probably low; "
                "Ember measures again when the machine is idle)")

    def to_json(self) -> dict:
        d = asdict(self)
        d["unified_memory"] = self.unified_memory
        return d


def _bandwidth_for(name: str, table: dict[str, float]) -> float | None:
    for key in sorted(table, key=len, reverse=True):  # most specific name first
        if key.lower() in name.lower():
            return float(table[key])
    return None


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
    elif platform.system() == "Darwin":
        brand = _sysctl("machdep.cpu.brand_string") or brand
        if platform.machine() == "arm64":
            flags = {"neon"}
    wanted = ("avx", "avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_int8",
              "amx_bf16", "fma", "f16c", "neon", "asimd", "sve")
    return brand, tuple(f for f in wanted if f in flags)


def cpu_name() -> str:
    """The CPU's model name ("AMD EPYC 9654", "Apple M3 Pro"), for reports and benchmarks."""
    return _cpu_info()[0]


def _sysctl(key: str) -> str | None:
    try:
        return subprocess.run(["sysctl", "-n", key], capture_output=True, text=True,
                              timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _nvidia_gpus() -> list[GPU]:
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,memory.total,memory.free,compute_cap",
                 "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
            gpus = []
            for line in out.stdout.strip().splitlines():
                name, total, free, cc = (x.strip() for x in line.split(","))
                gpus.append(GPU(name, "nvidia", int(total) << 20, int(free) << 20, cc,
                                _bandwidth_for(name, GPU_BANDWIDTH_GBPS)))
            if gpus:
                return gpus
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
    # torch takes seconds to import: only where an NVIDIA driver could answer it (on Linux,
    # the kernel module's /proc entry; a dev venv has torch on machines without any GPU)
    no_driver = platform.system() == "Linux" and not os.path.exists("/proc/driver/nvidia")
    if not no_driver and importlib.util.find_spec("torch") is not None:
        try:
            import torch

            if torch.cuda.is_available():
                gpus = []
                for i in range(torch.cuda.device_count()):
                    p = torch.cuda.get_device_properties(i)
                    free, total = torch.cuda.mem_get_info(i)
                    gpus.append(GPU(p.name, "nvidia", total, free, f"{p.major}.{p.minor}",
                                    _bandwidth_for(p.name, GPU_BANDWIDTH_GBPS)))
                return gpus
        except Exception:  # a broken CUDA install must not break detection
            return []
    return []


def _apple_chip(ram_total: int) -> tuple[str | None, list[GPU]]:
    if platform.system() != "Darwin" or platform.machine() != "arm64":
        return None, []
    brand = _sysctl("machdep.cpu.brand_string") or "Apple Silicon"
    chip = brand.removeprefix("Apple ").strip()
    bandwidth, cores = next(((bw, c) for name, (bw, c) in sorted(
        APPLE_CHIPS.items(), key=lambda kv: len(kv[0]), reverse=True) if name in chip),
        (None, None))
    wired = gpu_wired_bytes(ram_total, _sysctl("iogpu.wired_limit_mb"))
    gpu = GPU(f"{brand} GPU ({cores or '?'} cores)", "apple", wired, wired, None, bandwidth)
    return chip, [gpu]


def gpu_wired_bytes(ram_total: int, wired_limit_mb: str | None = None) -> int:
    """Unified memory the GPU may wire: `sysctl iogpu.wired_limit_mb` when a user raised (or
    lowered) it, else macOS's default share (gpu_wired_share); 0 in the sysctl means default."""
    try:
        limit = int(wired_limit_mb or 0)
    except ValueError:
        limit = 0
    if limit > 0:
        return min(ram_total, limit << 20)
    return int(ram_total * gpu_wired_share(ram_total))


def gpu_wired_share(ram_total: int) -> float:
    """How much of unified memory macOS lets the GPU wire by default (recommendedMaxWorking-
    SetSize): about 2/3 on machines up to 36 GB, 3/4 above."""
    return 0.67 if ram_total <= 36 * 2**30 else 0.75


def measure_cpu_bandwidth(threads: int, megabytes: int = 256, seconds: float = 0.6) -> float:
    """Read bandwidth in GB/s: `threads` threads scan their own buffers with numpy's max,
    which releases the GIL and is bandwidth-bound (a float sum is compute-bound: 7 GB/s
    per thread against 10 for max, docs/notes/fit-model.md)."""
    import numpy as np

    buffers = [np.ones(megabytes * 2**20 // 8, dtype=np.int64) for _ in range(threads)]
    for b in buffers:
        b.max()  # touch every page once
    passes = [0] * threads
    deadline = time.perf_counter() + seconds

    def work(i: int) -> None:
        while time.perf_counter() < deadline:
            buffers[i].max()
            passes[i] += 1

    start = time.perf_counter()
    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    return round(sum(passes) * megabytes * 2**20 / elapsed / 1e9, 1)


def _cores() -> tuple[int, int]:
    """(logical, physical) CPU cores."""
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    return logical, psutil.cpu_count(logical=False) or logical


@dataclass(frozen=True)
class BandwidthReading:
    """One measurement of the CPU's read bandwidth, as hardware.json keeps it."""
    gbps: float
    measured_at: str  # ISO 8601, local time with its offset
    others_busy: float  # the share of all CPU time that other processes used meanwhile

    @property
    def settled(self) -> bool:
        return self.others_busy < BUSY_SHARE


class _OthersCpu:
    """The share of the machine's CPU time that processes other than this one use, between
    `__init__` and `share()` (steal time counts: on a VM that is another guest's work)."""

    def __init__(self) -> None:
        self._own = psutil.Process()
        self._start = (time.perf_counter(), self._busy(), self._own_cpu())

    @staticmethod
    def _busy() -> float:
        t = psutil.cpu_times()
        return sum(t) - t.idle - getattr(t, "iowait", 0.0)

    def _own_cpu(self) -> float:
        t = self._own.cpu_times()
        return t.user + t.system

    def share(self) -> float:
        started, busy, own = self._start
        elapsed = max(time.perf_counter() - started, 1e-3)
        others = (self._busy() - busy) - (self._own_cpu() - own)
        return round(min(max(others / (elapsed * _cores()[0]), 0.0), 1.0), 2)


def read_cpu_bandwidth(threads: int) -> BandwidthReading:
    """Measure now, noting how busy the rest of the machine was meanwhile."""
    others = _OthersCpu()
    gbps = measure_cpu_bandwidth(threads)
    return BandwidthReading(gbps, datetime.now().astimezone().isoformat(timespec="seconds"),
                            others.share())


def machine_idle(seconds: float = IDLE_SAMPLE_S) -> bool:
    others = _OthersCpu()
    time.sleep(seconds)
    return others.share() < BUSY_SHARE


def _bandwidth_key(cpu: str, physical_cores: int) -> str:
    """hardware.json's key for a measured bandwidth: the CPU and its cores."""
    return f"{cpu}|{physical_cores}"


def _saved_bandwidth(cache: Path, key: str) -> BandwidthReading | None:
    """The reading kept for this machine. One from before the time and load were kept is
    provisional: it may come from a busy first start."""
    try:
        saved = json.loads(cache.read_text())
        if saved.get("key") == key:
            return BandwidthReading(float(saved["cpu_bandwidth_gbps"]),
                                    str(saved.get("measured_at", "")),
                                    float(saved.get("others_busy", 1.0)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def bandwidth_known() -> bool:
    """Whether `detect()` will not need to measure (about a second): a settled measurement
    of this machine is kept in hardware.json, or it is an Apple chip (table)."""
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        return True
    key = _bandwidth_key(_cpu_info()[0], _cores()[1])
    saved = _saved_bandwidth(config.paths().home / "hardware.json", key)
    return saved is not None and saved.settled


def _cached_cpu_bandwidth(cpu: str, cores: int) -> BandwidthReading:
    """A settled reading is kept for good. Without one, Ember measures: at once when nothing
    is kept, else when the machine is idle now; a busy measurement keeps the higher of the
    two figures (others' work only lowers what a measurement sees)."""
    cache = config.paths().home / "hardware.json"
    key = _bandwidth_key(cpu, cores)
    saved = _saved_bandwidth(cache, key)
    if saved is not None and (saved.settled or not machine_idle()):
        return saved
    reading = read_cpu_bandwidth(cores)
    if saved is not None and not reading.settled and saved.gbps > reading.gbps:
        reading = saved
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"key": key, "cpu_bandwidth_gbps": reading.gbps,
                                     "measured_at": reading.measured_at,
                                     "others_busy": reading.others_busy}))
    except OSError:
        pass
    return reading


def torch_cuda_version() -> str | None:
    """torch's version when it is installed and CUDA works through it, else None. Only
    called on machines with an NVIDIA GPU: importing torch takes seconds."""
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        import torch

        return str(torch.__version__) if torch.cuda.is_available() else None
    except Exception:  # a broken CUDA install means "no", not a crash
        return None


def llama_cpp_uses_amx() -> bool | None:
    """Whether the installed llama.cpp build has AMX compiled in (None: not installed)."""
    from app.runtime.backend_choice import llama_cpp_system_info

    info = llama_cpp_system_info()
    return None if info is None else "AMX" in info


def _llama_cpp_gpus(nvidia: list[GPU]) -> tuple[list[GPU], list[str]]:
    """The GPUs llama.cpp's own backends find (app.runtime.gpu_devices), less those
    nvidia-smi listed (their entries in `nvidia` gain the copy bandwidth measured on them),
    and a note for each GPU backend that did not load or a probe that failed."""
    from app.runtime.gpu_devices import gpu_devices

    report = gpu_devices()
    notes = [f"llama.cpp's GPU backend left out: {line}" for line in report.failed]
    if report.error:
        notes.append(f"llama.cpp's GPUs could not be read: {report.error}")
    gpus = []
    for d in report.devices:
        copy = best_reading(d.description, d.memory_total, d.copy_gbps)
        table = _bandwidth_for(d.description, GPU_BANDWIDTH_GBPS)
        measured = dict(copy_gbps=copy.gbps, copy_measured_at=copy.measured_at) if copy else {}
        smi = next((i for i, g in enumerate(nvidia) if d.vendor == "nvidia"
                    and g.copy_gbps is None and g.name in d.description), None)
        if smi is not None:  # nvidia-smi's entry has its compute capability: it gains the
            # copy and the backend that runs it (CUDA, or Vulkan without the CUDA module)
            nvidia[smi] = replace(nvidia[smi], llama_backend=d.backend, **measured)
            continue
        gpus.append(GPU(d.description, d.vendor, d.memory_total, d.memory_free,
                        bandwidth_gbps=table or (copy.gbps if copy else None),
                        llama_backend=d.backend, shared_memory=d.type == "igpu",
                        max_tensor_bytes=MAX_STORAGE_BUFFER.get(d.vendor), **measured))
    return gpus, notes


def _cuda_module_note(gpus: tuple[GPU, ...]) -> list[str]:
    """An NVIDIA GPU that llama.cpp drives through Vulkan (or not at all) because its CUDA
    backend, a download of its own, is not installed: say how to get it."""
    from app.gpu_module.offer import cuda_missing, manifest_named, vulkan_runs_nvidia

    if not cuda_missing(gpus):
        return []
    how = ("`ember cuda install` downloads it (with NVIDIA's cuBLAS, about 0.5 GB)"
           if manifest_named() else "this build names no download for it; `bash "
           "packaging/llama_cpp_cuda.sh PYTHON --install` builds it with the CUDA toolkit")
    now = ("GGUF models use the NVIDIA GPU through Vulkan" if vulkan_runs_nvidia() else
           "GGUF models cannot use the NVIDIA GPU (no Vulkan driver answered either)")
    return [f"llama.cpp's CUDA backend is not installed, so {now}: {how}"]


def detect(measure: bool = True) -> HardwareProfile:
    brand, isa = _cpu_info()
    vm = psutil.virtual_memory()
    logical, physical = _cores()
    chip, apple_gpus = _apple_chip(vm.total)
    nvidia = _nvidia_gpus()
    llama_gpus, notes = _llama_cpp_gpus(nvidia)
    gpus = tuple(nvidia) + tuple(llama_gpus) + tuple(apple_gpus)
    notes += _cuda_module_note(gpus)
    if "amx_tile" in isa:
        uses = llama_cpp_uses_amx()
        if uses is False:
            notes.append("AMX present but unused: Ember builds llama.cpp without AMX because "
                         "upstream segfaults in ggml_backend_amx_mul_mat (llama.cpp issue "
                         "20824); EMBER_LLAMA_AMX=1 at set-up keeps it")
        elif uses:
            notes.append("AMX present and used by llama.cpp")
    reading: BandwidthReading | None = None
    if chip is not None:
        bandwidth, source = apple_gpus[0].bandwidth_gbps or DEFAULT_CPU_BANDWIDTH_GBPS, "table"
    elif measure:
        reading = _cached_cpu_bandwidth(brand, physical)
        bandwidth, source = reading.gbps, "measured"
    else:
        bandwidth, source = DEFAULT_CPU_BANDWIDTH_GBPS, "default"
    return HardwareProfile(
        os=f"{platform.system()} {platform.release()}", machine=platform.machine(), cpu=brand,
        physical_cores=physical, logical_cores=logical, isa=isa, ram_total=vm.total,
        ram_available=vm.available, gpus=gpus, apple_chip=chip, cpu_bandwidth_gbps=bandwidth,
        bandwidth_source=source, notes=tuple(notes),
        bandwidth_measured_at=reading.measured_at if reading else None,
        bandwidth_others_busy=reading.others_busy if reading else None,
        torch_cuda=torch_cuda_version() if any(g.vendor == "nvidia" for g in gpus) else None)
