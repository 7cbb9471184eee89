"""llama.cpp's own error lines, kept while a model loads, so that a load that fails says why
("failed to allocate Vulkan0 buffer of size 247216640") rather than llama-cpp-python's
"Failed to load model from file". llama-cpp-python's log callback stays in charge of what is
printed; this one forwards every line to it.

ggml's levels: 1 debug, 2 info, 3 warn, 4 error, 5 continues the line before (llama-cpp-python
0.3's table in `_logger` predates the debug level, so it files errors as debug and never
prints them with verbose off)."""

from __future__ import annotations

import ctypes
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import llama_cpp
import llama_cpp._logger as llama_logger

GGML_LOG_ERROR = 4
_ALLOC = re.compile(r"failed to allocate (\S+) buffer of size (\d+)")
_lock = threading.Lock()
_listeners: list[list[str]] = []


@llama_cpp.llama_log_callback
def _callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    if level == GGML_LOG_ERROR and _listeners:
        line = text.decode("utf-8", errors="replace").strip()
        with _lock:
            for lines in _listeners:
                lines.append(line)
    llama_logger.llama_log_callback(level, text, user_data)


@contextmanager
def llama_errors() -> Iterator[list[str]]:
    """The error lines llama.cpp logs while the block runs (any thread's). The callback is
    set on each entry: whoever set another since (a test reading the log) is replaced."""
    llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))
    lines: list[str] = []
    with _lock:
        _listeners.append(lines)
    try:
        yield lines
    finally:
        with _lock:
            _listeners.remove(lines)


def load_failure(lines: list[str], error: Exception) -> str:
    """Why a load failed, in llama.cpp's words where it gave them: the buffer it could not
    allocate, else its last error line, else the Python error."""
    for line in lines:
        found = _ALLOC.search(line)
        if found:
            return (f"llama.cpp could not allocate a {int(found[2]) / 2**20:.1f} MiB buffer on "
                    f"{found[1]}")
    return lines[-1] if lines else str(error)
