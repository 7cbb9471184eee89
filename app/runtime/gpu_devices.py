"""The GPUs llama.cpp can use on this machine, as its own backends see them (Vulkan, CUDA),
with their memory and the bandwidth a copy on each reaches: the truth for llama.cpp's
offload, beside `nvidia-smi` and Apple's chip.

Asked in a short child process (backends.llamacpp.ggml_backends loads the GPU backends
there), never in the app's own: a Vulkan driver that crashes or hangs costs the answer, not
the window. The answer is kept for the life of the process.

The child is skipped where it could find nothing: a llama.cpp build without GPU backend
modules, `EMBER_GPU=off`, or a Linux machine with no GPU device node (`/dev/dri/renderD*`,
`/dev/nvidia*`) and no `GGML_VK_VISIBLE_DEVICES` (which is how the tests put Mesa's lavapipe,
a Vulkan device on the CPU, in front of llama.cpp: ggml leaves CPU-type Vulkan devices out
unless named).
"""

from __future__ import annotations

import glob
import importlib.util
import logging
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from backends.gpu_switch import gpu_allowed

log = logging.getLogger(__name__)

# The whole probe, devices and bandwidths together: the first start's splash waits on it. A
# first Vulkan start compiles nothing, but a slow driver takes seconds.
PROBE_SECONDS = 60.0
GPU_MODULES = ("ggml-vulkan", "ggml-cuda", "ggml-hip", "ggml-sycl")
# what a device's description starts with or holds, lower-cased -> vendor
VENDOR_WORDS = (("nvidia", "nvidia"), ("geforce", "nvidia"), ("quadro", "nvidia"),
                ("amd", "amd"), ("radeon", "amd"), ("intel", "intel"), ("arc", "intel"),
                ("apple", "apple"), ("llvmpipe", "lavapipe"), ("lavapipe", "lavapipe"))


@dataclass(frozen=True)
class GgmlDevice:
    name: str  # "Vulkan0", "CUDA0"
    description: str  # "AMD Radeon RX 7800 XT (RADV NAVI32)"
    type: str  # gpu | igpu (shares the system's memory)
    backend: str  # "Vulkan", "CUDA"
    memory_total: int
    memory_free: int
    # GB/s in a device-to-device copy, best of several (backends.llamacpp.device_bandwidth);
    # None: not measured (too little free memory, or the measurement failed)
    copy_gbps: float | None = None

    @property
    def vendor(self) -> str:
        text = self.description.lower()
        return next((v for word, v in VENDOR_WORDS if word in text.split()
                     or text.startswith(word)), "other")


@dataclass(frozen=True)
class DeviceReport:
    devices: tuple[GgmlDevice, ...] = ()  # GPUs only (the CPU is not listed)
    failed: tuple[str, ...] = ()  # a GPU backend that did not load, one line each
    skipped: str | None = None  # why no child was asked
    error: str | None = None  # the child failed: why


def _lib_dir() -> Path | None:
    if os.environ.get("LLAMA_CPP_LIB_PATH"):
        return Path(os.environ["LLAMA_CPP_LIB_PATH"])
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "lib"


def _has_gpu_modules(folder: Path | None) -> bool:
    if folder is None:
        return False
    names = [f"lib{m}.so" for m in GPU_MODULES] + [f"{m}.dll" for m in GPU_MODULES]
    return any((folder / n).is_file() for n in names)


def _has_added_modules(environ: dict[str, str]) -> bool:
    """A GPU backend installed after Ember (`ember cuda install`) in the data folder."""
    from backends.gpu_modules import MODULES_ENV

    root = environ.get(MODULES_ENV)
    return root is not None and any(Path(root).glob("*/libggml-*.so"))


def why_skip(environ: dict[str, str] | None = None, lib_dir: Path | None = None,
             platform: str = sys.platform) -> str | None:
    """Why asking would find nothing here, or None when a child should be asked."""
    environ = dict(os.environ) if environ is None else environ
    if not gpu_allowed(environ):
        return "EMBER_GPU=off"
    if (not _has_gpu_modules(lib_dir if lib_dir is not None else _lib_dir())
            and not _has_added_modules(environ)):
        return "this llama.cpp build has no GPU backend"
    if (platform.startswith("linux") and "GGML_VK_VISIBLE_DEVICES" not in environ
            and not glob.glob("/dev/dri/renderD*") and not glob.glob("/dev/nvidia[0-9]*")):
        return "no GPU device on this system (/dev/dri, /dev/nvidia*)"
    return None


def _child(conn: Connection) -> None:
    """Sends the devices, then their bandwidths: a driver that crashes while measuring
    costs the bandwidths, not the devices."""
    try:
        from backends.llamacpp.ggml_backends import measure_bandwidths, report

        conn.send(report())
        conn.send(measure_bandwidths())
    except BaseException as e:  # the parent gets the reason, whatever it is
        conn.send({"error": f"{type(e).__name__}: {e}"})
    finally:
        conn.close()


def _bandwidths(conn: Connection, timeout: float) -> dict[str, float | None]:
    """The child's second message; nothing where it fails or dies measuring."""
    try:
        if conn.poll(timeout):
            data = conn.recv()
            if "error" not in data:
                return {str(k): (float(v) if v else None) for k, v in data.items()}
            log.warning("GPU bandwidth not measured: %s", data["error"])
        else:
            log.warning("GPU bandwidth not measured: no answer in the %.0f s the probe had "
                        "left", timeout)
    except (EOFError, OSError, TypeError, ValueError, AttributeError):
        log.warning("GPU bandwidth not measured: the probe died measuring it")
    return {}


def ask(timeout: float = PROBE_SECONDS) -> DeviceReport:
    """The GPUs llama.cpp's backends find, from a child process, within `timeout` seconds in
    all: the bandwidths get what the devices left of it."""
    started = time.monotonic()
    report = _ask(timeout)
    log.info("llama.cpp's GPU probe: %d device(s)%s in %.1f s", len(report.devices),
             f", {report.error}" if report.error else "", time.monotonic() - started)
    return report


def _ask(timeout: float) -> DeviceReport:
    deadline = time.monotonic() + timeout
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child, args=(child,), daemon=True, name="ember-gpu-probe")
    process.start()
    child.close()
    try:
        if not parent.poll(timeout):
            return DeviceReport(error=f"no answer within {timeout:.0f} s (a GPU driver hangs?)")
        data = parent.recv()
        if "error" not in data:
            data["copy_gbps"] = _bandwidths(parent, max(0.0, deadline - time.monotonic()))
    except EOFError:
        process.join(5)
        return DeviceReport(error=f"the probe died (exit status {process.exitcode}): a GPU "
                                  "driver crashed while starting")
    finally:
        if process.is_alive():
            process.kill()
        process.join(5)
        parent.close()
    if "error" in data:
        return DeviceReport(error=str(data["error"]))
    copy = data.get("copy_gbps", {})
    devices = tuple(GgmlDevice(**{k: d[k] for k in GgmlDevice.__dataclass_fields__
                                  if k != "copy_gbps"}, copy_gbps=copy.get(d["name"]))
                    for d in data.get("devices", ()) if d.get("type") in ("gpu", "igpu"))
    return DeviceReport(devices=devices, failed=tuple(data.get("failed", ())))


_report: DeviceReport | None = None


def gpu_devices() -> DeviceReport:
    """This machine's llama.cpp GPUs, asked once per process."""
    global _report
    if _report is None:
        skipped = why_skip()
        _report = DeviceReport(skipped=skipped) if skipped else ask()
        if _report.error:
            log.warning("llama.cpp's GPU devices could not be read: %s", _report.error)
    return _report
