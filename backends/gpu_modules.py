"""What the app that installs llama.cpp GPU backend modules (app.gpu_module: `ember cuda
install`) and the engine that loads them (backends.llamacpp.added_modules) agree on: the
environment variable that names the folder, the manifest each module keeps beside it, the
backends that come as modules, and the names of the llama.cpp build and platform a module
must match. Nothing here loads llama.cpp."""

from __future__ import annotations

import platform
import sys
from importlib import metadata

MODULES_ENV = "EMBER_LLAMA_MODULES"
MANIFEST_NAME = "module.json"
# the GPU backends ggml builds as modules, in the order its own loader tries them (the order
# matters: llama.cpp runs a card on the first backend that registered it)
BACKENDS = ("cuda", "hip", "sycl", "vulkan")


def this_platform() -> str:
    """`linux-x86_64`, `win32-amd64`: what a module's manifest names."""
    return f"{sys.platform}-{platform.machine().lower()}"


def llama_cpp_version() -> str:
    """The installed llama-cpp-python's version, from its metadata (a bundle ships it), without
    loading the library."""
    try:
        return metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        import llama_cpp

        return str(llama_cpp.__version__)
