"""Write cuda-module.json beside a libggml-cuda.so, naming no runtime wheels, for
`ember cuda install --from DIR` on the GPU-checks machine, where torch's nvidia/cu13 wheels
already hold cuBLAS and nothing can be downloaded (benchmarks/gpu_checks.sh). A release's
manifest comes from packaging/cuda_module_manifest.py and pins NVIDIA's wheels.

    python benchmarks/cuda_pack.py DIR    # DIR holds libggml-cuda.so
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import llama_cpp

    from app.gpu_module.manifest import ModuleFile, ModuleManifest
    from backends.gpu_modules import this_platform

    folder = Path(sys.argv[1])
    module = folder / "libggml-cuda.so"
    data = module.read_bytes()
    manifest = ModuleManifest(
        backend="cuda", llama_cpp_version=llama_cpp.__version__, platform=this_platform(),
        module=ModuleFile("libggml-cuda.so", module.name, hashlib.sha256(data).hexdigest(),
                          len(data)), toolkit="the GPU checks' build")
    (folder / "cuda-module.json").write_text(json.dumps(manifest.to_json(), indent=2))
    print(f"{folder / 'cuda-module.json'}: {len(data) / 1e6:.1f} MB module")


if __name__ == "__main__":
    main()
