"""A clean minimal Debian root (debootstrap --variant=minbase) to install a .deb into, as on a
user's fresh system: only what the package's Depends bring in is there (traps 6 and 7 of
docs/notes/packaging-traps.md were found this way). Needs root, debootstrap and the Debian mirror.

The debootstrapped root is cached as a tarball keyed by its suite, variant and mirror, and the
packages apt downloads are kept between runs; each test gets a fresh copy of the root."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.models import TEST_HOME

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
CACHE = TEST_HOME.parent / "packaging"
USER_ID = 1000


def root_tarball() -> Path:
    key = hashlib.sha256(f"{SUITE} minbase {MIRROR}".encode()).hexdigest()[:12]
    tarball = CACHE / f"debian-{SUITE}-minbase-{key}.tar"
    if tarball.exists():
        return tarball
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        root = Path(tmp) / "root"
        subprocess.run(["debootstrap", "--variant=minbase", SUITE, str(root), MIRROR],
                       check=True, capture_output=True)
        partial = Path(tmp) / "root.tar"
        subprocess.run(["tar", "-C", str(root), "-cf", str(partial), "."], check=True)
        partial.rename(tarball)  # atomic: a half-written tarball is never found
    return tarball


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve())
    with open("/proc/mounts") as f:
        return [line.split()[1] for line in f if line.split()[1].startswith(prefix)]


@dataclass
class CleanRoot:
    path: Path

    def run(self, *cmd: str, user: bool = False, env: dict[str, str] | None = None,
            check: bool = True, timeout: float = 900, **kw) -> subprocess.CompletedProcess:
        """`cmd` inside the root, as root or as the desktop user (uid 1000, HOME set)."""
        base = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8",
                "DEBIAN_FRONTEND": "noninteractive"}
        if user:
            base["HOME"] = "/home/user"
        args = ["chroot", *([f"--userspec={USER_ID}:{USER_ID}"] if user else []),
                str(self.path), "/usr/bin/env", "-i",
                *(f"{k}={v}" for k, v in {**base, **(env or {})}.items()), *cmd]
        return subprocess.run(args, check=check, timeout=timeout, capture_output=True,
                              text=True, **kw)

    def popen(self, *cmd: str, env: dict[str, str]) -> subprocess.Popen:
        """`cmd` running in the background as the desktop user."""
        full = {"PATH": "/usr/bin:/bin", "HOME": "/home/user", "LANG": "C.UTF-8", **env}
        return subprocess.Popen(
            ["chroot", f"--userspec={USER_ID}:{USER_ID}", str(self.path), "/usr/bin/env",
             "-i", *(f"{k}={v}" for k, v in full.items()), *cmd],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    @property
    def user_home(self) -> Path:
        return self.path / "home" / "user"


@contextmanager
def clean_root() -> Iterator[CleanRoot]:
    """A fresh copy of the minimal root with /proc, /dev and the X socket folder mounted, a
    desktop user (uid 1000) and apt's package cache shared between runs."""
    tarball = root_tarball()
    archives = CACHE / "apt-archives"
    (archives / "partial").mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="ember-root-"))
    root = tmp / "root"
    root.mkdir()
    mounted: list[Path] = []
    try:
        subprocess.run(["tar", "-C", str(root), "-xf", str(tarball)], check=True)
        shutil.copy2("/etc/resolv.conf", root / "etc" / "resolv.conf")
        Path("/tmp/.X11-unix").mkdir(mode=0o1777, exist_ok=True)
        for source, target, options in (
                ("proc", "proc", ["-t", "proc"]), ("/dev", "dev", ["--bind"]),
                ("/dev/pts", "dev/pts", ["--bind"]), ("/dev/shm", "dev/shm", ["--bind"]),
                ("/tmp/.X11-unix", "tmp/.X11-unix", ["--bind"]),
                (str(archives), "var/cache/apt/archives", ["--bind"])):
            point = root / target
            point.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", *options, source, str(point)], check=True)
            mounted.append(point)
        r = CleanRoot(root)
        r.run("useradd", "--uid", str(USER_ID), "--create-home", "--shell", "/bin/sh", "user")
        yield r
    finally:
        for point in reversed(mounted):
            subprocess.run(["umount", "-l", str(point)], check=False)
        if _mounts_under(root):
            raise RuntimeError(f"{root} still has mounts ({_mounts_under(root)}); "
                               "left in place rather than deleting through them")
        shutil.rmtree(tmp, ignore_errors=True)
