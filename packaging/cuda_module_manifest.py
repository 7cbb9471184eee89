"""Write the manifest of a built llama.cpp CUDA module (`cuda-module.json`, read by
app.gpu_module), and optionally a folder that holds everything it names, for `ember cuda
install --from DIR` on a machine that reaches no index.

    python packaging/cuda_module_manifest.py MODULE.so OUT_DIR [--url URL] [--with-wheels]

The module is copied to OUT_DIR under a name that says its build; its `url` in the manifest is
that name (relative: a release uploads the two side by side) unless `--url` gives another. The
runtime libraries it links are pinned to wheels of the package index (NVIDIA's
nvidia-cuda-runtime and nvidia-cublas of the toolkit's CUDA line, manylinux x86-64), by file
name, SHA-256 and size as the index lists them; `--with-wheels` downloads them into OUT_DIR
too and checks that each holds the libraries named.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.utils import parse_wheel_filename

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.gpu_module.manifest import ModuleFile, ModuleManifest, RuntimeWheel
from app.pull import http_file, simple_index
from app.pull.index_url import index_url
from app.pull.pypi_mirror import index_client
from backends.gpu_modules import this_platform

# package, the libraries ggml-cuda links from it (NEEDED: libcudart, libcublas, libcublasLt)
RUNTIME = (("nvidia-cuda-runtime", ("cudart",)), ("nvidia-cublas", ("cublas", "cublasLt")))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def _toolkit() -> tuple[str, int]:
    out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=True)
    found = re.search(r"release (\d+)\.(\d+)", out.stdout)
    if not found:
        raise SystemExit(f"cannot read the CUDA version from nvcc: {out.stdout[-200:]}")
    return f"CUDA {found[1]}.{found[2]}", int(found[1])


def _pinned_wheel(client, index: str, package: str, major: int, minor: int,
                  libs: tuple[str, ...]) -> tuple[RuntimeWheel, str]:
    """The newest wheel of `package` for CUDA major.minor on manylinux x86-64."""
    files = simple_index.project_files(client, index, package)
    best = None
    for f in files:
        if f.yanked or not f.filename.endswith(".whl") or "x86_64" not in f.filename:
            continue
        _, version, _, _ = parse_wheel_filename(f.filename)
        if version.release[:2] == (major, minor) and (best is None or version > best[0]):
            best = (version, f)
    if best is None or not best[1].sha256 or not best[1].size:
        raise SystemExit(f"{package}: no x86_64 wheel for CUDA {major}.{minor} with a SHA-256 "
                         "and size on the index")
    f = best[1]
    members = tuple(f"nvidia/cu{major}/lib/lib{lib}.so.{major}" for lib in libs)
    return RuntimeWheel(package, f.filename, f.sha256.lower(), int(f.size), members), f.url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("module", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--url", default=None, help="where the module will be fetched from")
    ap.add_argument("--archs", default="", help="the GPU architectures it was built for")
    ap.add_argument("--llama-cpp-version", required=True)
    ap.add_argument("--with-wheels", action="store_true")
    args = ap.parse_args()

    toolkit, major = _toolkit()
    minor = int(toolkit.split(".")[1])
    args.out.mkdir(parents=True, exist_ok=True)
    module_sha = _sha256(args.module)
    shipped = f"libggml-cuda-{args.llama_cpp_version}-cu{major}-{module_sha[:12]}.so"
    shutil.copyfile(args.module, args.out / shipped)
    wheels = []
    index = index_url()
    with index_client() as client:
        for package, libs in RUNTIME:
            wheel, url = _pinned_wheel(client, index.url, package, major, minor, libs)
            wheels.append(wheel)
            if args.with_wheels:
                got = http_file.download(client, url, args.out / wheel.filename, wheel.sha256,
                                         lambda _n, _m: None, None)
                with zipfile.ZipFile(got) as z:
                    missing = [m for m in wheel.libraries if m not in z.namelist()]
                if missing:
                    raise SystemExit(f"{wheel.filename} lacks {missing}")
    manifest = ModuleManifest(
        backend="cuda", llama_cpp_version=args.llama_cpp_version, platform=this_platform(),
        module=ModuleFile("libggml-cuda.so", args.url or shipped, module_sha,
                          args.module.stat().st_size),
        runtime=tuple(wheels), toolkit=toolkit, architectures=args.archs)
    (args.out / "cuda-module.json").write_text(json.dumps(manifest.to_json(), indent=2) + "\n")
    print(args.out / "cuda-module.json")


if __name__ == "__main__":
    main()
