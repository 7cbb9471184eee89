"""Parse a PDF or .docx in a child process bounded in time and memory.

pypdf and python-docx (lxml) run on bytes from strangers: a crafted file can make them spin
for minutes or eat all memory, and inside the window's process that freezes or kills the app.
The parse runs in a spawned child instead. The parent waits at most `limits.seconds` and then
kills it; on Linux and macOS the child caps its own address space (RLIMIT_AS) at
`limits.memory_bytes`, so an allocation past it fails there and the refusal says so. Windows
has no RLIMIT_AS (a job object would do it; not done): there only the time limit holds.

Plain text stays in the caller's process: it is read with a size limit already and spawning a
child costs more than reading it (see docs/notes/security.md).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import zipfile
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from app.documents.reader import DOCX_SUFFIX, PDF_SUFFIX, Document, DocumentError, read_document
from app.documents.zipcheck import check_zip

GIB = 1 << 30
MB = 1 << 20


def _amount(n: float) -> str:
    return f"{n / GIB:g} GiB" if n >= GIB else f"{n / MB:g} MiB"


@dataclass(frozen=True)
class ParseLimits:
    seconds: float = 60.0
    memory_bytes: int = 2 * GIB


def read_isolated(path: Path, limits: ParseLimits | None = None) -> Document:
    """read_document(path), a PDF or .docx in a child process within `limits`. DocumentError
    with the reason when the file is refused, the limits are hit or the child dies."""
    path = Path(path)
    kind = {PDF_SUFFIX: "PDF", DOCX_SUFFIX: ".docx"}.get(path.suffix.lower())
    if kind is None:
        return read_document(path)
    limits = limits or ParseLimits()
    name = path.name
    if kind == ".docx" and zipfile.is_zipfile(path):
        check_zip(name, path)  # a zip bomb is refused here, without starting a child
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, str(path), limits.memory_bytes), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(limits.seconds):
            raise DocumentError(name, f"reading it took longer than {limits.seconds:g} s; "
                                      "Ember stopped (a file crafted to hang readers?)")
        try:
            status, payload = parent.recv()
        except (EOFError, OSError):
            proc.join(5)
            raise DocumentError(name, f"the {kind} reader crashed on it (exit code "
                                      f"{proc.exitcode})") from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        parent.close()
    if status == "ok":
        return payload
    if status == "memory":
        raise DocumentError(name, f"reading it needed more than {_amount(limits.memory_bytes)} "
                                  "of memory; Ember stopped (a file crafted to exhaust it?)")
    raise DocumentError(name, payload)


NEAR_CAP = 16 * MB


def _peak_bytes() -> int:
    """The most memory this process has held: its peak address space on Linux, its peak
    resident size elsewhere (0 where neither is known)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    if sys.platform == "darwin":
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS
    return 0


def _child(conn: Connection, path: str, memory_bytes: int) -> None:
    import docx  # noqa: F401  (the readers' libraries are mapped before the cap)
    import pypdf  # noqa: F401
    if sys.platform != "win32":
        import resource
        # the cap counts the child's interpreter and libraries too: about 150 MiB of it
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    try:
        conn.send(("ok", read_document(Path(path))))
    except MemoryError:
        conn.send(("memory", None))
    except DocumentError as e:
        # lxml and zlib report a failed allocation as a broken file ("XMLSyntaxError: unknown
        # error"): a parse that failed at the cap failed for want of memory
        conn.send(("memory", None) if _peak_bytes() > memory_bytes - NEAR_CAP
                  else ("error", e.why))
    finally:
        conn.close()
    os._exit(0)  # skip interpreter teardown: nothing to flush
