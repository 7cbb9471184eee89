"""Ember's Linux packages from a PyInstaller onedir bundle: a .deb, a portable .tar.zst and an
AppDir (the input of appimagetool), plus a JSON build report (sizes by component, the
instruction check, the dependencies).

    python packaging/linux_packages.py --bundle dist/ember --icons build/icons --out dist

packaging/build_linux.sh runs it after PyInstaller. Needs dpkg-deb and dpkg-shlibdeps
(dpkg-dev), binutils (objdump for the instruction check, readelf and strip for the debug
info) and zstd.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import __version__  # noqa: E402
from app.identity import APP_ID, APP_NAME  # noqa: E402
from app.service.spec import UNIT_NAME, packaged_spec  # noqa: E402
from app.service.units import systemd_unit  # noqa: E402

# The onedir bundle, in bytes (issue 18; kept at issue 35). 264 MB when set, 293 MB by issue
# 35: documents brought cryptography (14.8 MB, pypdf's AES) and lxml with python-docx (10.6 MB),
# MCP a few pure-Python packages. Stripping the debug info some binaries carry (libpython,
# uvloop, Python's own modules: strip_debug_info) took it to 254 MB, which leaves room for
# what came next: the multimodal library for vision (libmtmd, 1.8 MB per llama.cpp library
# folder; with Pillow, which decodes the images, issue 42) and llama.cpp's Vulkan backend
# (libggml-vulkan, about 40 MB unpacked as another project ships it; issue 39 measures ours).
# CUDA's backend and runtime are hundreds of MB: an optional download, not part of this budget.
SIZE_BUDGET = 300 * 1000 * 1000
# Not NEEDED by any binary, but the window shows no text without them
# (docs/notes/packaging-traps.md, trap 7), and desktop-file-utils/hicolor update the menus
# and icon caches through their dpkg triggers.
EXTRA_DEPENDS = ["fontconfig", "fonts-dejavu-core"]
MAINTAINER = "Ember developers <ember@users.noreply.github.com>"
HOMEPAGE = "https://github.com/ember-app/ember"
SUMMARY = "Run large language models on your own machine"
# Bundle components for the size report: first matching prefix of the path under _internal/.
COMPONENTS = [
    ("qt: ICU data", ("PySide6/Qt/lib/libicu",)),
    ("qt: libraries and plugins", ("PySide6", "shiboken6", "libQt6", "libpyside6",
                                   "libshiboken6", "libxcb", "libxkbcommon")),
    ("numpy (with OpenBLAS)", ("numpy", "libscipy_openblas", "libgfortran", "libquadmath")),
    ("python runtime", ("libpython", "python3", "base_library.zip", "lib-dynload", "libssl",
                        "libcrypto", "libsqlite3", "libffi", "libz.", "liblzma", "libbz2",
                        "libreadline", "libtinfo", "libuuid", "libzstd", "libgssapi",
                        "libkrb5", "libk5crypto", "libcom_err", "libkeyutils")),
    ("llama.cpp (baseline, variants, Vulkan)", ("llama_cpp",)),
    ("llguidance", ("llguidance",)),
    ("uvicorn, uvloop, httptools", ("uvloop", "httptools", "uvicorn", "websockets")),
    ("huggingface_hub, hf_xet", ("hf_xet", "huggingface_hub")),
    ("pydantic", ("pydantic",)),
    ("documents: cryptography (AES-encrypted PDFs)", ("cryptography", "_cffi_backend")),
    ("documents: lxml (python-docx)", ("lxml", "docx")),
    ("yaml, markupsafe, other extensions", ("yaml", "_yaml", "markupsafe", "charset_normalizer",
                                            "psutil", "tokenizers")),
]


@dataclass
class Report:
    version: str
    bundle_bytes: int
    within_budget: bool
    components: dict[str, int]
    files: int
    depends: list[str]
    artifacts: dict[str, int]
    instruction_check: dict
    build_seconds: int | None = None
    stripped_bytes: int = 0  # the debug info strip_debug_info removed


def tree_bytes(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def components(bundle: Path) -> dict[str, int]:
    sizes: dict[str, int] = {}
    internal = bundle / "_internal"
    for f in bundle.rglob("*"):
        if not f.is_file() or f.is_symlink():
            continue
        rel = f.relative_to(internal).as_posix() if f.is_relative_to(internal) else f.name
        name = next((n for n, prefixes in COMPONENTS if rel.startswith(prefixes)),
                    "executable" if f.parent == bundle else "other")
        sizes[name] = sizes.get(name, 0) + f.stat().st_size
    return dict(sorted(sizes.items(), key=lambda kv: -kv[1]))


def elf_files(root: Path) -> list[Path]:
    found = []
    for f in root.rglob("*"):
        if f.is_file() and not f.is_symlink():
            with f.open("rb") as fh:
                if fh.read(4) == b"\x7fELF":
                    found.append(f)
    return found


def has_debug_info(elf: Path) -> bool:
    out = subprocess.run(["readelf", "-S", "-W", str(elf)], capture_output=True, text=True)
    return " .debug_info " in out.stdout


def strip_debug_info(bundle: Path) -> int:
    """Remove the DWARF debug sections from the bundle's binaries that carry them (the build
    machine's libpython and Python modules, uvloop, yaml, httptools: 39 MB in all) and return
    the bytes saved. Only `--strip-debug`: symbol tables stay, and a library without debug
    info is never rewritten. A full strip of every library breaks those that auditwheel
    re-laid out with patchelf (numpy's OpenBLAS: "ELF load command address/offset not
    page-aligned" at import), which is why PyInstaller's own strip=True is off."""
    saved = 0
    for elf in elf_files(bundle):
        if not has_debug_info(elf):
            continue
        before = elf.stat().st_size
        subprocess.run(["strip", "--strip-debug", str(elf)], check=True)
        saved += before - elf.stat().st_size
    return saved


def shlib_depends(bundle: Path) -> list[str]:
    """The Debian packages the bundle's binaries need, from dpkg-shlibdeps (versioned from the
    libraries' symbols files), plus EXTRA_DEPENDS."""
    elves = elf_files(bundle)
    private = sorted({str(f.parent) for f in elves})
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "debian").mkdir()
        (Path(tmp) / "debian" / "control").write_text(
            "Source: ember\n\nPackage: ember\nArchitecture: any\n")
        out = subprocess.run(
            ["dpkg-shlibdeps", "-O", "--ignore-missing-info", "--warnings=0",
             *(f"-l{d}" for d in private), *(f"-e{f}" for f in elves)],
            cwd=tmp, capture_output=True, text=True)
    if out.returncode != 0:
        errors = [ln for ln in out.stderr.splitlines() if "error:" in ln]
        raise SystemExit("dpkg-shlibdeps failed:\n" + "\n".join(errors[:20]))
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("shlibs:Depends="))
    deps = [d.strip() for d in line.split("=", 1)[1].split(",") if d.strip()]
    return deps + [d for d in EXTRA_DEPENDS if d not in deps]


def install_desktop_files(share: Path, icons: Path) -> None:
    """.desktop entry, AppStream metainfo and the hicolor icons under `share` (usr/share)."""
    linux = ROOT / "packaging" / "linux"
    (share / "applications").mkdir(parents=True, exist_ok=True)
    shutil.copy2(linux / f"{APP_ID}.desktop", share / "applications")
    (share / "metainfo").mkdir(parents=True, exist_ok=True)
    shutil.copy2(linux / f"{APP_ID}.metainfo.xml", share / "metainfo")
    shutil.copytree(icons / "hicolor", share / "icons" / "hicolor", dirs_exist_ok=True)


def install_service_unit(root: Path) -> Path:
    """`ember service`'s systemd user unit, offered and not enabled: a user turns it on with
    `systemctl --user enable --now ember` (or `ember service install`, which writes its own
    in ~/.config/systemd/user and takes precedence)."""
    unit = root / "usr" / "lib" / "systemd" / "user" / UNIT_NAME
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text(systemd_unit(packaged_spec()), encoding="utf-8")
    unit.chmod(0o644)
    return unit


def build_deb(bundle: Path, icons: Path, out: Path, depends: list[str]) -> Path:
    deb = out / f"ember_{__version__}_amd64.deb"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        shutil.copytree(bundle, root / "opt" / "ember", symlinks=True)
        (root / "usr" / "bin").mkdir(parents=True)
        (root / "usr" / "bin" / "ember").symlink_to("/opt/ember/ember")
        install_desktop_files(root / "usr" / "share", icons)
        install_service_unit(root)
        doc = root / "usr" / "share" / "doc" / "ember"
        doc.mkdir(parents=True)
        (doc / "copyright").write_text(textwrap.dedent(f"""\
            Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
            Upstream-Name: {APP_NAME}
            Source: {HOMEPAGE}

            Files: *
            License: Apache-2.0
             Ember bundles Python, Qt (PySide6, LGPL-3.0), llama.cpp (MIT) and the Python
             packages listed in /opt/ember/_internal/*.dist-info, each under its own license.
            """))
        control = root / "DEBIAN"
        control.mkdir()
        installed_kb = (tree_bytes(root) + 1023) // 1024
        (control / "control").write_text(textwrap.dedent(f"""\
            Package: ember
            Version: {__version__}
            Architecture: amd64
            Maintainer: {MAINTAINER}
            Installed-Size: {installed_kb}
            Depends: {", ".join(depends)}
            Section: utils
            Priority: optional
            Homepage: {HOMEPAGE}
            Description: {SUMMARY}
             Ember runs large language models on this machine: a chat window, the `ember`
             command and an OpenAI- and Ollama-compatible API server. It tells you which models
             fit your hardware and downloads them for you.
             .
             Your models, conversations and settings live in ~/.local/share/ember and are
             kept when Ember is upgraded or removed (also with --purge).
             .
             The API server can run in the background: a systemd user unit is included and
             not enabled (`systemctl --user enable --now ember`, or `ember service install`).
            """))
        # gzip: xz/zstd -19 took over 2.5 minutes on 2 cores for the same file (trap 14)
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z6", "--build",
                        str(root), str(deb)], check=True, capture_output=True)
    return deb


def build_tarball(bundle: Path, icons: Path, out: Path) -> Path:
    name = f"ember-{__version__}-linux-x86_64"
    tarball = out / f"{name}.tar.zst"
    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp) / name
        shutil.copytree(bundle, top, symlinks=True)
        install_desktop_files(top / "share", icons)
        (top / "README.txt").write_text(textwrap.dedent(f"""\
            {APP_NAME} {__version__}, portable build for x86-64 Linux (glibc 2.36 or newer).

            Start the window: ./ember        The command line: ./ember --help
            Your models, conversations and settings live in ~/.local/share/ember, not here:
            delete this folder to remove Ember; replace it to upgrade.
            The menu entry and icon (optional): copy share/ to ~/.local/share/.
            """))
        subprocess.run(["tar", "-C", tmp, "-I", "zstd -T0 -10", "-cf", str(tarball), name],
                       check=True)
    return tarball


APPRUN = """#!/bin/sh
# AppImage entry: the bundle lives in usr/lib/ember
HERE=$(dirname "$(readlink -f "$0")")
exec "$HERE/usr/lib/ember/ember" "$@"
"""


def build_appdir(bundle: Path, icons: Path, out: Path) -> Path:
    appdir = out / f"{APP_NAME}.AppDir"
    shutil.rmtree(appdir, ignore_errors=True)
    shutil.copytree(bundle, appdir / "usr" / "lib" / "ember", symlinks=True)
    (appdir / "usr" / "bin").mkdir(parents=True)
    (appdir / "usr" / "bin" / "ember").symlink_to("../lib/ember/ember")
    install_desktop_files(appdir / "usr" / "share", icons)
    shutil.copy2(appdir / "usr" / "share" / "applications" / f"{APP_ID}.desktop", appdir)
    shutil.copy2(icons / "hicolor" / "256x256" / "apps" / f"{APP_ID}.png", appdir)
    (appdir / ".DirIcon").symlink_to(f"{APP_ID}.png")
    apprun = appdir / "AppRun"
    apprun.write_text(APPRUN)
    apprun.chmod(0o755)
    return appdir


def instruction_check(bundle: Path) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "packaging" / "check_instructions.py"),
                          str(bundle)], capture_output=True, text=True)
    try:
        result = json.loads(out.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"the instruction check printed no JSON:\n{out.stdout[-2000:]}"
                         f"{out.stderr[-2000:]}") from None
    if out.returncode != 0:
        raise SystemExit("the bundle holds instructions its baseline CPU lacks:\n"
                         + json.dumps(result, indent=1)[:4000])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--icons", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--build-seconds", type=int)
    args = ap.parse_args()
    bundle: Path = args.bundle.resolve()
    stripped = strip_debug_info(bundle)
    size = tree_bytes(bundle)
    check = instruction_check(bundle)
    depends = shlib_depends(bundle)
    artifacts = [build_deb(bundle, args.icons, args.out, depends),
                 build_tarball(bundle, args.icons, args.out)]
    appdir = build_appdir(bundle, args.icons, args.out)
    report = Report(
        version=__version__, bundle_bytes=size, within_budget=size <= SIZE_BUDGET,
        components=components(bundle), files=sum(1 for _ in bundle.rglob("*")),
        depends=depends,
        artifacts={**{a.name: a.stat().st_size for a in artifacts},
                   appdir.name: tree_bytes(appdir)},
        instruction_check=check, build_seconds=args.build_seconds, stripped_bytes=stripped)
    (args.out / "build-report.json").write_text(json.dumps(asdict(report), indent=1))
    print(json.dumps(asdict(report), indent=1))
    if not report.within_budget:
        raise SystemExit(f"the bundle is {size / 1e6:.0f} MB, over the "
                         f"{SIZE_BUDGET / 1e6:.0f} MB budget")


if __name__ == "__main__":
    main()
