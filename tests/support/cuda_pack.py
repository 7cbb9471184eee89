"""A llama.cpp CUDA module as a release publishes it (tests of app.gpu_module): its manifest
and file, and NVIDIA's runtime wheel, on one local server speaking the package index's
Simple API (tests.support.package_index). The module cannot run here (no GPU): its bytes
stand in; tests/integration/test_llama_vulkan.py installs a module that runs."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import llama_cpp

from backends.gpu_modules import this_platform
from tests.support.package_index import IndexedFile, PackageIndex, serve_index

VERSION = llama_cpp.__version__
CUDART = "nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
MODULE_FILE = f"libggml-cuda-{VERSION}-cu13-test.so"
MODULE = b"\x7fELF" + bytes(range(256)) * 800  # 200 KB
CUDART_LIBRARY = b"cudart" * 5000


def runtime_wheel(libraries: dict[str, bytes]) -> bytes:
    """A wheel shaped as NVIDIA's: headers and the libraries under nvidia/cu13/."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("nvidia/cu13/include/cuda_runtime.h", "/* header */\n")
        for member, data in libraries.items():
            z.writestr(member, data)
        z.writestr("nvidia_cuda_runtime-13.0.96.dist-info/RECORD", "")
    return out.getvalue()


WHEEL = runtime_wheel({"nvidia/cu13/lib/libcudart.so.13": CUDART_LIBRARY})


def manifest_json(module: bytes, wheel: bytes, **changes) -> dict:
    data = {
        "format": 1, "backend": "cuda", "llama_cpp_version": VERSION,
        "platform": this_platform(), "toolkit": "CUDA 13.0", "architectures": "90-real",
        "module": {"file": "libggml-cuda.so", "url": MODULE_FILE,
                   "sha256": hashlib.sha256(module).hexdigest(), "bytes": len(module)},
        "runtime": [{"package": "nvidia-cuda-runtime", "filename": CUDART,
                     "sha256": hashlib.sha256(wheel).hexdigest(), "bytes": len(wheel),
                     "libraries": ["nvidia/cu13/lib/libcudart.so.13"]}]}
    data.update(changes)
    return data


@dataclass
class Release:
    index: PackageIndex  # EMBER_PYPI_INDEX is index.index_url
    manifest: IndexedFile

    @property
    def url(self) -> str:
        return f"{self.index.url}/files/cuda-module.json"


@contextmanager
def served_release(module_bytes_per_s: int | None = None) -> Iterator[Release]:
    with serve_index(PackageIndex()) as index:
        index.add("nvidia-cuda-runtime", IndexedFile(CUDART, WHEEL))
        index.add("ember-release", IndexedFile(MODULE_FILE, MODULE,
                                               bytes_per_s=module_bytes_per_s))
        manifest = index.add("ember-release", IndexedFile(
            "cuda-module.json", json.dumps(manifest_json(MODULE, WHEEL)).encode()))
        yield Release(index, manifest)
