"""The manifest of a llama.cpp GPU backend module that Ember downloads instead of shipping
(`cuda-module.json`, written by `packaging/cuda_module_manifest.py` when the module is built):
the module file's SHA-256 and size, the llama.cpp build it belongs to, and the runtime
libraries it links, as pinned wheels of the package index (NVIDIA's own `nvidia-cuda-runtime`
and `nvidia-cublas`, the files torch's CUDA wheels bring).

A manifest is read as hostile input: it names files Ember writes and URLs it fetches, so every
name is checked against a fixed shape (no folder parts), every hash is 64 hex digits, every
size has a ceiling, and a module file is always `libggml-<backend>.so`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from app.errors import DownloadError
from backends.gpu_modules import BACKENDS

FORMAT = 1
MAX_FILE_BYTES = 4 << 30  # no module or wheel of these is near it (cuBLAS 13: 0.42 GB)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_WHEEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*\.whl")
_LIBRARY = re.compile(r"lib[A-Za-z0-9_+-]+(\.[A-Za-z0-9_+-]+)*\.so(\.[0-9]+)*")
_MEMBER = re.compile(r"[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*")
_PACKAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class ModuleFile:
    name: str  # libggml-cuda.so: the name ggml loads it by
    url: str  # where to fetch it: absolute, or relative to the manifest
    sha256: str
    bytes: int


@dataclass(frozen=True)
class RuntimeWheel:
    """A wheel of the package index that holds libraries the module links."""
    package: str  # nvidia-cublas
    filename: str  # nvidia_cublas-13.0.2.14-py3-none-manylinux_2_27_x86_64.whl
    sha256: str
    bytes: int
    libraries: tuple[str, ...]  # members to take: nvidia/cu13/lib/libcublas.so.13

    @staticmethod
    def library_name(member: str) -> str:
        return member.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class ModuleManifest:
    backend: str  # cuda
    llama_cpp_version: str  # the llama-cpp-python whose ggml built it: only that one loads it
    platform: str  # linux-x86_64
    module: ModuleFile
    runtime: tuple[RuntimeWheel, ...] = ()
    toolkit: str = ""  # what built it, for the status line: "CUDA 13.0"
    architectures: str = ""  # the GPUs it has kernels for: "75-real;86-real;89-real;90-real"

    @property
    def download_bytes(self) -> int:
        return self.module.bytes + sum(w.bytes for w in self.runtime)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "backend": self.backend,
                "llama_cpp_version": self.llama_cpp_version, "platform": self.platform,
                "toolkit": self.toolkit, "architectures": self.architectures,
                "module": {"file": self.module.name, "url": self.module.url,
                           "sha256": self.module.sha256, "bytes": self.module.bytes},
                "runtime": [{"package": w.package, "filename": w.filename, "sha256": w.sha256,
                             "bytes": w.bytes, "libraries": list(w.libraries)}
                            for w in self.runtime]}


class ManifestError(DownloadError):
    pass


def _field(data: dict, key: str, kind: type, where: str) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ManifestError(f"{where}: {key!r} must be a {kind.__name__}, not {value!r:.80}")
    return value


def _sha(data: dict, where: str) -> str:
    value = _field(data, "sha256", str, where).lower()
    if not _HEX64.fullmatch(value):
        raise ManifestError(f"{where}: sha256 must be 64 hex digits, not {value!r:.80}")
    return value


def _size(data: dict, where: str) -> int:
    value = _field(data, "bytes", int, where)
    if not 0 < value <= MAX_FILE_BYTES:
        raise ManifestError(f"{where}: bytes must be between 1 and {MAX_FILE_BYTES}, not {value}")
    return value


def _url(value: str, where: str) -> str:
    if value.startswith(("http://", "https://")):
        return value
    if ":" in value or value.startswith("/") or "\\" in value or ".." in value.split("/"):
        raise ManifestError(f"{where}: url must be http(s) or a plain relative path, not "
                            f"{value!r:.80}")
    return value


def _wheel(data: Any, where: str) -> RuntimeWheel:
    if not isinstance(data, dict):
        raise ManifestError(f"{where}: must be an object")
    package = _field(data, "package", str, where)
    filename = _field(data, "filename", str, where)
    if not _PACKAGE.fullmatch(package) or not _WHEEL.fullmatch(filename):
        raise ManifestError(f"{where}: {package!r:.60} / {filename!r:.80} is not a package "
                            "and wheel file name")
    members = _field(data, "libraries", list, where)
    if not members or not all(isinstance(m, str) and _MEMBER.fullmatch(m)
                              and ".." not in m.split("/")
                              and _LIBRARY.fullmatch(RuntimeWheel.library_name(m))
                              for m in members):
        raise ManifestError(f"{where}: libraries must be wheel members named lib*.so*, not "
                            f"{members!r:.120}")
    return RuntimeWheel(package, filename, _sha(data, where), _size(data, where),
                        tuple(members))


def parse_manifest(text: str | bytes, source: str) -> ModuleManifest:
    """The manifest in `text` (from `source`, for the messages), checked whole."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ManifestError(f"{source} is not a module manifest: not JSON ({e})") from e
    if not isinstance(data, dict):
        raise ManifestError(f"{source} is not a module manifest: not a JSON object")
    if data.get("format") != FORMAT:
        raise ManifestError(f"{source}: manifest format {data.get('format')!r:.20}; this Ember "
                            f"reads format {FORMAT}")
    backend = _field(data, "backend", str, source)
    if backend not in BACKENDS:
        raise ManifestError(f"{source}: backend {backend!r:.40} is not one of "
                            f"{', '.join(BACKENDS)}")
    module = _field(data, "module", dict, source)
    where = f"{source} (module)"
    name = _field(module, "file", str, where)
    if name != f"libggml-{backend}.so":
        raise ManifestError(f"{where}: the module of backend {backend} is libggml-{backend}.so, "
                            f"not {name!r:.80}")
    runtime = data.get("runtime", [])
    if not isinstance(runtime, list):
        raise ManifestError(f"{source}: runtime must be a list")
    wheels = tuple(_wheel(w, f"{source} (runtime {i + 1})") for i, w in enumerate(runtime))
    names = [RuntimeWheel.library_name(m) for w in wheels for m in w.libraries] + [name]
    if len(set(names)) != len(names):
        raise ManifestError(f"{source}: two files would be installed as the same name")
    return ModuleManifest(
        backend=backend,
        llama_cpp_version=_field(data, "llama_cpp_version", str, source),
        platform=_field(data, "platform", str, source),
        module=ModuleFile(name, _url(_field(module, "url", str, where), where),
                          _sha(module, where), _size(module, where)),
        runtime=wheels, toolkit=str(data.get("toolkit", ""))[:80],
        architectures=str(data.get("architectures", ""))[:200])
