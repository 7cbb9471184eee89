"""The devices llama.cpp can run on, asked of ggml itself, and the backend libraries Ember
loads for them.

The portable build (packaging/llama_cpp_portable.sh) is made with `GGML_BACKEND_DL`: each
backend is a library of its own in llama_cpp's lib folder (`libggml-cpu.so`,
`libggml-vulkan.so`, `libggml-cuda.so` where built), loaded at run time, so one build runs on
any machine and uses the GPUs it finds. ggml's own loader (`ggml_backend_load_all`, called by
`llama_backend_init` when nothing is registered) looks in the executable's folder and the
current directory: for Python that is Python's bin folder and wherever the user stands, which
finds nothing, and would load a `libggml-*.so` planted in the working folder. So Ember loads
them itself, by path, before `llama_backend_init`: the CPU build cpu_variant chose, then each
GPU backend shipped, unless `EMBER_GPU=off`. A GPU backend that cannot load (no Vulkan loader
on the system, a driver that fails) costs one logged line, and the CPU carries on.

A build without `GGML_BACKEND_DL` (the native development wheel, macOS with Metal) registers
its backends when ggml starts; nothing is loaded then, and the device list is the same call.

GPU backends are loaded only in a process that runs llama.cpp on them: the engine's worker,
or the short child that `ember hw` asks (app.runtime.gpu_devices; by hand: `python -m
backends.llamacpp.device_report`), so a driver that crashes never takes the app down. Other
processes get the CPU backend alone (backends.llamacpp's import loads it).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from backends.gpu_modules import BACKENDS
from backends.gpu_switch import gpu_allowed

log = logging.getLogger(__name__)

# The GPU backends a build may ship, in the order ggml's own loader tries them.
GPU_BACKENDS = BACKENDS
# ggml_backend_dev_type
DEVICE_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}


@dataclass(frozen=True)
class Device:
    name: str  # ggml's name: "CPU", "Vulkan0", "CUDA0"
    description: str  # what the driver calls it: "NVIDIA GeForce RTX 4070", "llvmpipe (...)"
    type: str  # cpu | gpu | igpu | accel
    backend: str  # the backend that runs it: "CPU", "Vulkan", "CUDA"
    memory_total: int  # bytes
    memory_free: int
    max_buffer: int = 0  # the largest buffer it allocates (ggml_backend_buft_get_max_size)
    device_id: str | None = None  # the PCI bus id ("0000:c1:00.0"), where the backend knows it


class _DevCaps(ctypes.Structure):
    _fields_ = [("async_", ctypes.c_bool), ("host_buffer", ctypes.c_bool),
                ("buffer_from_host_ptr", ctypes.c_bool), ("events", ctypes.c_bool),
                ("mmap_support", ctypes.c_bool)]


class _DevProps(ctypes.Structure):
    """ggml_backend_dev_props (ggml-backend.h), with room to spare after it: a later ggml
    that adds fields writes them there, not past the buffer."""
    _fields_ = [("name", ctypes.c_char_p), ("description", ctypes.c_char_p),
                ("memory_free", ctypes.c_size_t), ("memory_total", ctypes.c_size_t),
                ("type", ctypes.c_int), ("device_id", ctypes.c_char_p), ("caps", _DevCaps),
                ("_spare", ctypes.c_byte * 256)]


@dataclass(frozen=True)
class Loaded:
    """What Ember loaded into this process's ggml, and what it could not."""
    dynamic: bool  # a GGML_BACKEND_DL build (else the backends were compiled in)
    loaded: tuple[str, ...] = ()  # library file names
    failed: tuple[str, ...] = ()  # "libggml-vulkan.so: why", one line each
    gpu_off: bool = False  # EMBER_GPU=off kept the GPU backends out
    devices: tuple[Device, ...] = field(default_factory=tuple)


def lib_dir() -> Path:
    """llama_cpp's lib folder, where llama_cpp itself loads libllama from (it honours
    LLAMA_CPP_LIB_PATH the same way)."""
    import llama_cpp.llama_cpp as bindings

    return Path(bindings._base_path)


def _suffix() -> str:
    return ".dll" if sys.platform == "win32" else ".so"


def _lib_name(stem: str) -> str:
    return f"{stem}{_suffix()}" if sys.platform == "win32" else f"lib{stem}{_suffix()}"


def _loaded_ggml(folder: Path) -> Path:
    """The libggml file libllama loaded: by its SONAME (libggml.so.0), which is what the
    dynamic linker opened through libllama's RUNPATH. A wheel holds the library three times
    as separate files (zip has no symlinks); opening another of them would load a second
    copy of ggml, with a backend registry of its own that libllama never sees."""
    if sys.platform.startswith("linux"):
        sonames = sorted(folder.glob("libggml.so.[0-9]"))
        if sonames:
            return sonames[0]
    elif sys.platform == "darwin":
        for name in ("libggml.0.dylib", "libggml.dylib"):
            if (folder / name).is_file():
                return folder / name
    return folder / _lib_name("ggml")


class _Ggml:
    """ggml's backend-registry functions, from the libggml llama_cpp already loaded."""

    def __init__(self, folder: Path) -> None:
        lib = ctypes.CDLL(str(_loaded_ggml(folder)))
        p, c, s = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
        self._lib = lib
        for name, res, args in (
            ("ggml_backend_reg_count", s, []), ("ggml_backend_load", p, [c]),
            ("ggml_backend_dev_count", s, []), ("ggml_backend_dev_get", p, [s]),
            ("ggml_backend_dev_name", c, [p]), ("ggml_backend_dev_description", c, [p]),
            ("ggml_backend_dev_type", ctypes.c_int, [p]),
            ("ggml_backend_dev_backend_reg", p, [p]), ("ggml_backend_reg_name", c, [p]),
            ("ggml_backend_dev_buffer_type", p, [p]), ("ggml_backend_buft_get_max_size", s, [p]),
        ):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        self._lib.ggml_backend_dev_memory.restype = None
        self._lib.ggml_backend_dev_memory.argtypes = [p, ctypes.POINTER(s), ctypes.POINTER(s)]
        self._lib.ggml_backend_dev_get_props.restype = None
        self._lib.ggml_backend_dev_get_props.argtypes = [p, ctypes.POINTER(_DevProps)]

    def registered(self) -> int:
        return int(self._lib.ggml_backend_reg_count())

    def load(self, path: Path) -> bool:
        return bool(self._lib.ggml_backend_load(os.fsencode(path)))

    def devices(self) -> tuple[Device, ...]:
        """Every device, less a GPU that an earlier backend already drives: llama.cpp uses the
        first device of each PCI bus id (an NVIDIA card seen by CUDA and by Vulkan is CUDA0,
        CUDA being loaded first), and so does every plan made from this list."""
        return first_of_each_gpu(self._all_devices())

    def _all_devices(self) -> tuple[Device, ...]:
        lib = self._lib
        out = []
        for i in range(int(lib.ggml_backend_dev_count())):
            dev = lib.ggml_backend_dev_get(i)
            free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
            lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
            props = _DevProps()
            lib.ggml_backend_dev_get_props(dev, ctypes.byref(props))
            reg = lib.ggml_backend_dev_backend_reg(dev)
            out.append(Device(
                name=(lib.ggml_backend_dev_name(dev) or b"").decode(errors="replace"),
                description=(lib.ggml_backend_dev_description(dev) or b"").decode(
                    errors="replace").strip(),
                type=DEVICE_TYPES.get(lib.ggml_backend_dev_type(dev), "unknown"),
                backend=(lib.ggml_backend_reg_name(reg) or b"").decode(errors="replace"),
                memory_total=total.value, memory_free=free.value,
                max_buffer=int(lib.ggml_backend_buft_get_max_size(
                    lib.ggml_backend_dev_buffer_type(dev))),
                device_id=props.device_id.decode(errors="replace") if props.device_id else None))
        return tuple(out)


def first_of_each_gpu(devices: tuple[Device, ...]) -> tuple[Device, ...]:
    """`devices` less each GPU whose PCI bus id an earlier GPU has (llama.cpp's own rule in
    llama_model_load_from_file: the first backend to find a card runs it)."""
    seen: set[str] = set()
    kept = []
    for d in devices:
        if d.type == "gpu" and d.device_id is not None:
            if d.device_id in seen:
                continue
            seen.add(d.device_id)
        kept.append(d)
    return tuple(kept)


def _why_not(path: Path) -> str:
    """Why the dynamic loader refuses `path`, in its own words (ggml only logs it)."""
    try:
        ctypes.CDLL(str(path))
    except OSError as e:
        return str(e).replace(str(path.parent) + os.sep, "")
    return "ggml could not register it (its device failed to start)"


_ggml: _Ggml | None = None
_dynamic = False
_loaded_files: list[str] = []
_failed: list[str] = []
_gpu_tried = False
_gpu_off = False


def load_backends(gpu: bool = True, cpu_library: Path | None = None,
                  environ: Mapping[str, str] = os.environ) -> Loaded:
    """Load the backends of a GGML_BACKEND_DL build into this process: the CPU backend
    (`cpu_library`, default: the variant cpu_variant chose, else the one in llama_cpp's lib
    folder) on the first call, and each GPU backend in the lib folder on the first call with
    `gpu` (unless EMBER_GPU=off). Must run before llama.cpp is initialised; later calls add
    what is missing and report. A build with compiled-in backends loads nothing."""
    global _ggml, _dynamic, _gpu_tried, _gpu_off
    folder = lib_dir()
    if _ggml is None:
        from llama_cpp._logger import set_verbose

        set_verbose(False)  # llama.cpp's own log: errors only (its loader logs each load)
        ggml = _Ggml(folder)
        _dynamic = ggml.registered() == 0
        if _dynamic:
            cpu = cpu_library or _chosen_cpu_library() or folder / _lib_name("ggml-cpu")
            if not ggml.load(cpu):
                # without a CPU backend llama.cpp can do nothing: an error, not a fallback
                from backends.errors import EmberError
                raise EmberError(f"llama.cpp's CPU backend {cpu} does not load: {_why_not(cpu)}")
            _loaded_files.append(str(cpu.relative_to(folder.parent)) if cpu.is_relative_to(
                folder.parent) else str(cpu))
        _ggml = ggml
    if gpu and _dynamic and not _gpu_tried:
        _gpu_tried = True
        _gpu_off = not gpu_allowed(environ)
        if not _gpu_off:
            _load_gpu_modules(_ggml, folder, environ)
        devices = _ggml.devices()
        log.info("llama.cpp backends: %s; devices: %s", ", ".join(_loaded_files),
                 "; ".join(f"{d.name} ({d.description})" for d in devices))
    return Loaded(dynamic=_dynamic, loaded=tuple(_loaded_files), failed=tuple(_failed),
                  gpu_off=_gpu_off, devices=_ggml.devices())


def _load_gpu_modules(ggml: _Ggml, folder: Path, environ: Mapping[str, str]) -> None:
    """Each GPU backend, in ggml's own order, from the build's lib folder or, where the build
    does not ship it, installed later (backends.llamacpp.added_modules: `ember cuda install`).
    The order matters: llama.cpp runs a card on the first backend that found it."""
    from backends.llamacpp.added_modules import added_modules

    added, refused = added_modules(environ)
    for line in refused:
        _failed.append(line)
        log.warning("a GPU backend module is left out: %s", line)
    by_backend = {m.backend: m.path for m in added}
    paths = []
    for name in GPU_BACKENDS:  # ggml's order: CUDA before Vulkan, which then yields the card
        shipped = folder / _lib_name(f"ggml-{name}")
        if shipped.is_file():
            paths.append((name, shipped, f"lib/{shipped.name}"))
        elif name in by_backend:
            paths.append((name, by_backend[name], str(by_backend[name])))
    for name, path, shown in paths:
        if ggml.load(path):
            _loaded_files.append(shown)
        else:
            _failed.append(f"{path.name}: {_why_not(path)}")
            log.warning("llama.cpp's %s backend is left out, the CPU runs the models: "
                        "%s", name, _failed[-1])


def measure_bandwidths() -> dict[str, float | None]:
    """Each GPU's copy bandwidth in GB/s by ggml device name (None: too little free memory
    to measure), after report() loaded the backends: backends.llamacpp.device_bandwidth."""
    from backends.llamacpp.device_bandwidth import copy_bandwidth, copy_bytes

    if _ggml is None:
        return {}
    lib = _ggml._lib
    return {d.name: copy_bandwidth(lib, lib.ggml_backend_dev_get(i),
                                   copy_bytes(d.memory_free, d.max_buffer))
            for i, d in enumerate(_ggml.devices()) if d.type in ("gpu", "igpu")}


def _chosen_cpu_library() -> Path | None:
    from backends.llamacpp import cpu_variant

    return cpu_variant.chosen.library if cpu_variant.chosen is not None else None


def report() -> dict:
    """The backends and devices of this machine as llama.cpp sees them (JSON-ready), the GPU
    backends loaded first: for a child process (app.runtime.gpu_devices, device_report)."""
    import backends.llamacpp  # noqa: F401  (chooses the CPU variant and loads the backends)
    from backends.llamacpp import cpu_variant

    loaded = load_backends(gpu=True)
    choice = cpu_variant.chosen
    return {"dynamic": loaded.dynamic, "loaded": list(loaded.loaded),
            "failed": list(loaded.failed), "gpu_off": loaded.gpu_off,
            "cpu_variant": choice.variant.name if choice else None,
            "devices": [asdict(d) for d in loaded.devices]}

