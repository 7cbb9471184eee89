#!/usr/bin/env python3
"""Prove a bundle holds no instruction beyond what it promises to run on.

Disassembles (objdump -d, binutils) every x86-64 ELF file in a folder and counts the
instructions of each extension past x86-64-v3 (AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE, the
baseline Ember's portable llama.cpp is built for). A folder holding `variant.json` (a llama.cpp
CPU variant, packaging/llama_cpp_portable.sh) is checked against the CPU flags it declares
there in "requires"; everything else against x86-64-v3. A finding outside that set is a
violation, unless the library is on ALLOWLIST (third-party code that picks its code path at
run time from the CPU it finds; see each reason). Prints JSON and exits 1 on a violation.

How AVX-512 is recognised in objdump's AT&T output (any one suffices):
  - a zmm register, or xmm16-31 / ymm16-31 (only EVEX can encode them);
  - an opmask register %k0-%k7 as an operand or a {%kN} mask, a {z}, {sae}/{rn-sae}
    rounding or {1toN} broadcast (EVEX-only syntax);
  - objdump's `{evex}` pseudo-prefix (an EVEX encoding of an instruction VEX also has);
  - a mnemonic only EVEX has: vpternlog*, vpermt2*/vpermi2*, vpcompress*/vpexpand*,
    narrowing vpmov[s|us]{qb,qw,qd,db,dw,wb}, vcvt*2u*/vcvtu*/..qq, vrcp14/vrsqrt14,
    vgetexp/vgetmant/vscalef/vfixupimm/vrndscale/vreduce/vrange/vfpclass, vpconflict,
    vplzcnt, k* mask instructions, vmovdqu8/16/32/64, vmovdqa32/64, vpandd/q...,
    vinsert/vextract/vbroadcast/vshuf with 32x4-style suffixes, vpcmp with u or a predicate.
Extensions past AVX-512's x86-64-v4 core (F, CD, BW, DQ, VL, reported together as "avx512")
are named by their own mnemonics: VNNI (vpdpbusd/vpdpwssd; `{vex}` marks the AVX-VNNI
form), VBMI, VBMI2, BF16, FP16, IFMA, BITALG, VPOPCNTDQ, AMX (tileloadd, tdpbssd,
ldtilecfg...), and GFNI, VAES, VPCLMULQDQ, AES, PCLMUL, SHA, ADX, RDSEED and AMD-only
FMA4/XOP/SSE4a, none of which x86-64-v3 includes.

Names are /proc/cpuinfo flag names, so a variant's "requires" reads directly.

    python packaging/check_instructions.py BUNDLE_DIR [--jobs N]
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

AVX512_CORE = frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})

# Third-party libraries that carry code past x86-64-v3 behind their own run-time CPU checks,
# each found by running this check over Ember's environment (numbers in the commit message).
# We did not prove their dispatch correct instruction by instruction: we rely on it, as every
# user of these libraries does. Their findings are still counted and printed. Linear-sweep
# disassembly can also decode data in .text as instructions, so a handful of odd finds (XOP
# in a Rust library) may be no code at all; a violation in our own libraries is never
# waved through on that ground.
ALLOWLIST: dict[str, str] = {
    "_multiarray_umath*.so": "numpy: AVX512F/AVX512_SKX/AVX512_ICL/AVX512_SPR dispatch "
                             "targets, chosen at import from cpuid (npy_cpu_dispatch)",
    "_simd*.so": "numpy: its SIMD test module, one submodule per dispatch target",
    "libscipy_openblas*.so": "OpenBLAS (numpy.libs) DYNAMIC_ARCH: SkylakeX/Cooperlake/"
                             "SapphireRapids kernels chosen at load from cpuid",
    "libgfortran*.so*": "libgfortran (numpy.libs): matmul variants for AVX-512F and FMA4 "
                        "chosen by __builtin_cpu_supports",
    "libcrypto.so*": "OpenSSL: AES-NI/SHA/ADX/AVX-512/IFMA/XOP code chosen from "
                     "OPENSSL_ia32cap (cpuid)",
    "libstdc++.so*": "libstdc++: std::random_device uses RDSEED only when cpuid reports it",
    "liblzma*.so*": "xz: CRC32/CRC64 with CLMUL, chosen from cpuid",
    "libQt6Core.so*": "Qt: qHash with AES/VAES and AVX-512 string paths behind "
                      "qCpuHasFeature (cpuid) checks",
    "hf_xet*.so": "hf_xet (Rust): AES/SHA/CLMUL/ADX/AVX-512 crypto and hashing chosen by "
                  "is_x86_feature_detected (cpuid)",
    "libavif*.so*": "Pillow's AVIF codec (dav1d, libyuv): AVX-512 ICL assembly chosen from "
                    "cpuid",
    # a pattern with a folder matches the end of the library's path (a generic file name)
    "cryptography/hazmat/bindings/_rust*.so": "cryptography (the mcp SDK's OAuth, through "
                                              "pyjwt): its statically linked OpenSSL picks "
                                              "AES-NI/SHA/AVX-512 code from OPENSSL_ia32cap "
                                              "(cpuid)",
}

# Prefix words objdump prints before a mnemonic.
PREFIXES = frozenset({"lock", "rep", "repz", "repnz", "repe", "repne", "notrack", "bnd",
                      "data16", "data32", "addr32", "cs", "ds", "es", "fs", "gs", "ss",
                      "xacquire", "xrelease", "{vex}", "{vex3}", "{vex2}", "{evex}",
                      "{load}", "{store}", "{disp8}", "{disp32}", "{rex}", "{rex2}"})

EVEX_OPERAND = re.compile(r"%zmm\d|%[xy]mm(1[6-9]|2\d|3[01])\b|%k[0-7]\b|\{z\}|\{1to\d+\}|"
                          r"\{(rn|rd|ru|rz)-sae\}|\{sae\}")
WIDE_VECTOR = re.compile(r"%[yz]mm\d")

# (extension, mnemonic pattern), first match wins; `{vex}` forms are handled before this.
MNEMONICS: list[tuple[str, re.Pattern[str]]] = [(ext, re.compile(p)) for ext, p in [
    ("amx_tile", r"(ldtilecfg|sttilecfg|tileloadd|tileloaddt1|tilestored|tilerelease|tilezero)$"),
    ("amx_int8", r"tdpb[su][su]d$"),
    ("amx_bf16", r"tdpbf16ps$"),
    ("amx_fp16", r"tdpfp16ps$"),
    ("avx512_vnni", r"vpdp(busd|busds|wssd|wssds)$"),
    ("avx512vbmi", r"(vpermb|vpermi2b|vpermt2b|vpmultishiftqb)$"),
    ("avx512_vbmi2", r"(vpcompress[bw]|vpexpand[bw]|vpshl?dv?[wdq]|vpshrdv?[wdq])$"),
    ("avx512_bf16", r"(vcvtne2ps2bf16|vcvtneps2bf16|vdpbf16ps)$"),
    ("avx512_fp16", r"(v(add|sub|mul|div|max|min|sqrt|rcp|rsqrt|getexp|getmant|scalef|reduce|"
                    r"rndscale|fpclass|cmp|comi|ucomi)(ph|sh)|vmovw|vmovsh|"
                    r"vf(n?m(add|sub)|maddsub|msubadd)\d{3}(ph|sh)|vfc?m(add|ul)c(ph|sh)|"
                    r"vcvtt?ph2(?!ps$)\w+|vcvtt?sh2\w+|vcvtps2phx|"
                    r"vcvt(pd|sd|ss|dq|udq|qq|uqq|w|uw|si|usi)2(ph|sh))$"),
    ("avx512ifma", r"vpmadd52[lh]uq$"),
    ("avx512_bitalg", r"(vpopcnt[bw]|vpshufbitqmb)$"),
    ("avx512_vpopcntdq", r"vpopcnt[dq]$"),
    ("avx512_vp2intersect", r"vp2intersect[dq]$"),
    ("avx512", r"(vpternlog[dq]|vpermt2\w+|vpermi2\w+|valign[dq]|vp?compress\w+|vp?expand\w+|"
               r"vpmov(s|us)?(qb|qw|qd|db|dw|wb)|vpmovm2[bwdq]|vpmov[bwdq]2m|"
               r"vcvtt?\w*2u(dq|qq|si|w)|vcvtu\w+|vcvtt?\w*(2qq|qq2)\w*|"
               r"vrcp14\w+|vrsqrt14\w+|vgetexp\w+|vgetmant\w+|vscalef\w+|vfixupimm\w+|"
               r"vrndscale\w+|vreduce\w+|vrange\w+|vfpclass\w+|vpconflict[dq]|vplzcnt[dq]|"
               r"vpbroadcastm\w+|vpabsq|vp(max|min)[su]q|vpmullq|vpsraq|vpsravq|"
               r"vpsllvw|vpsrlvw|vpsravw|vprolv?[dq]|vprorv?[dq]|vp?blendm\w+|vptestn?m\w+|"
               r"vpcmp(u?[bwdq]|(lt|le|neq|nlt|nle|false|true)u?[bwdq]|equ[bwdq])|"
               r"v(insert|extract)[fi](32x4|64x2|32x8|64x4)|vbroadcast[fi](32x2|32x4|64x2|"
               r"32x8|64x4)|vshuf[fi](32x4|64x2)|vpermw|vdbpsadbw|vmovdq[au](8|16|32|64)|"
               r"vp(and|andn|or|xor)[dq]|v?p?scatter\w+|vgatherpf\w+|vscatterpf\w+|"
               r"k(mov|and|andn|or|xor|xnor|not|shiftl|shiftr|test|ortest|unpck|add)[bwdq]\w*|"
               r"vexp2p[sd]|vrcp28\w+|vrsqrt28\w+)$"),
    ("gfni", r"v?gf2p8(affineqb|affineinvqb|mulb)$"),
    ("sha_ni", r"(sha1\w+|sha256\w+)$"),
    ("adx", r"(adcx|adox)$"),
    ("rdseed", r"rdseed$"),
    ("sse4a", r"(extrq|insertq|movntss|movntsd)$"),
    ("fma4", r"vfn?m(add|sub)(sub)?[ps][sd]$|vfmaddsub[ps][sd]$|vfmsubadd[ps][sd]$"),
    ("xop", r"(vprot[bwdq]|vpsha[bwdq]|vpshl[bwdq]|vpperm|vpcmov|vpcom\w+|vphadd(u)?(bw|bd|bq|"
            r"wd|wq|dq)|vphsub(bw|wd|dq)|vpmacs\w+|vpmadcs\w+|vfrcz\w+|vpermil2p[sd])$"),
]]
VEX_FORMS = {"vpdpbusd": "avx_vnni", "vpdpbusds": "avx_vnni", "vpdpwssd": "avx_vnni",
             "vpdpwssds": "avx_vnni", "vpmadd52luq": "avx_ifma", "vpmadd52huq": "avx_ifma",
             "vcvtneps2bf16": "avx_ne_convert"}
AES = re.compile(r"v?aes(enc|enclast|dec|declast|imc|keygenassist)$")
PCLMUL = re.compile(r"v?pclmul\w*qdq$")

# x86-64-v3 in cpuinfo names: everything we do not classify above is part of it.
BASELINE = frozenset({"avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "lzcnt", "movbe",
                      "popcnt", "sse4_2"})


def classify(line: str) -> str | None:
    """The extension past x86-64-v3 one line of `objdump -d --no-show-raw-insn` uses, or None.
    Lines that are not instructions give None."""
    parts = line.split("\t")
    if len(parts) < 2 or not parts[0].rstrip().endswith(":"):
        return None
    words = parts[1].split()
    vex = evex = False
    while words and words[0] in PREFIXES:
        vex |= words[0].startswith("{vex")
        evex |= words[0] == "{evex}"
        words = words[1:]
    if not words:
        return None
    operands = " ".join(words[1:])
    narrow, wide = mnemonic_extensions(words[0], vex)
    if wide != narrow:
        return wide if WIDE_VECTOR.search(operands) else narrow
    if narrow is not None:
        return narrow
    if evex or EVEX_OPERAND.search(operands):
        return "avx512"
    return None


@functools.cache
def mnemonic_extensions(mnemonic: str, vex: bool) -> tuple[str | None, str | None]:
    """The extension a mnemonic names on xmm registers and on ymm/zmm ones (they differ only
    for AES and PCLMUL), or None for both. Cached: a library uses a few thousand mnemonics
    across millions of lines, and matching every line against every pattern was most of the
    check's time (11 s of Python for libQt6Gui's 2 million lines, 3.9 s cached)."""
    if vex and mnemonic in VEX_FORMS:
        return VEX_FORMS[mnemonic], VEX_FORMS[mnemonic]
    for ext, pattern in MNEMONICS:
        if pattern.match(mnemonic):
            return ext, ext
    if AES.match(mnemonic):
        return "aes", "vaes"
    if PCLMUL.match(mnemonic):
        return "pclmulqdq", "vpclmulqdq"
    return None, None


@dataclass
class Scan:
    found: Counter[str] = field(default_factory=Counter)  # extension past x86-64-v3 -> count
    ymm: int = 0  # instructions on 256-bit registers: a baseline build without any has
    #               silently dropped to SSE (ggml does with SOURCE_DATE_EPOCH set)


def scan(lines: Iterable[str]) -> Scan:
    result = Scan()
    for line in lines:
        ext = classify(line)
        if ext is not None:
            result.found[ext] += 1
        if "%ymm" in line:
            result.ymm += 1
    return result


def allowed_by(declared: frozenset[str]) -> frozenset[str]:
    """The extension names a CPU with these cpuinfo flags runs ("avx512" needs all of v4)."""
    names = set(declared | BASELINE)
    if declared >= AVX512_CORE:
        names.add("avx512")
    return frozenset(names)


def is_x86_64_elf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            head = f.read(20)
    except OSError:
        return False
    # ELF magic, 64-bit, little-endian; e_machine (offset 18) 62 = x86-64.
    return head[:4] == b"\x7fELF" and head[4] == 2 and head[18:20] == b"\x3e\x00"


def disassemble(path: Path) -> Scan:
    proc = subprocess.Popen(["objdump", "-d", "--no-show-raw-insn", "-w", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace")
    assert proc.stdout is not None
    result = scan(proc.stdout)
    err = proc.stderr.read() if proc.stderr else ""
    if proc.wait() != 0:
        raise RuntimeError(f"objdump failed on {path}: {err.strip()}")
    return result


@dataclass
class Library:
    path: str
    checked_against: str  # "x86-64-v3" or "variant <name>"
    found: dict[str, int]
    violations: dict[str, int]
    ymm_instructions: int
    allowlisted: str | None = None
    aliases: list[str] = field(default_factory=list)


def declared_flags(folder: Path) -> tuple[str, frozenset[str]] | None:
    """(name, cpuinfo flags) from a variant folder's variant.json, else None."""
    spec = folder / "variant.json"
    if not spec.is_file():
        return None
    data = json.loads(spec.read_text(encoding="utf-8"))
    return str(data["name"]), frozenset(map(str, data["requires"]))


def elf_files(root: Path) -> tuple[list[Path], dict[Path, list[str]]]:
    """Every x86-64 ELF file under root once per rule it is checked by (x86-64-v3, or a
    variant folder's flags), with the other names of the same bytes under that rule: the
    symlinks to it and identical copies (a wheel holds each library three times). A real
    file is preferred to a symlink as the name checked."""
    by_content: dict[tuple[str, str], list[Path]] = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            if path.is_file() and is_x86_64_elf(path):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                rule = str(path.parent) if (path.parent / "variant.json").is_file() else ""
                by_content.setdefault((rule, digest), []).append(path)
    files, aliases = [], {}
    for paths in by_content.values():
        paths.sort(key=lambda p: (p.is_symlink(), len(p.name), str(p)))
        files.append(paths[0])
        aliases[paths[0]] = [str(p.relative_to(root)) for p in paths[1:]]
    return sorted(files), aliases


def check(root: Path, jobs: int) -> list[Library]:
    files, aliases = elf_files(root)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        scans = list(pool.map(disassemble, files))
    libraries = []
    for path, result in zip(files, scans, strict=True):
        found = result.found
        variant = declared_flags(path.parent)
        label, allowed = (("x86-64-v3", allowed_by(frozenset())) if variant is None
                          else (f"variant {variant[0]}", allowed_by(variant[1])))
        reason = next((why for pattern, why in ALLOWLIST.items()
                       if fnmatch.fnmatch(path.name, pattern)
                       or ("/" in pattern and fnmatch.fnmatch(path.as_posix(), f"*/{pattern}"))),
                      None)
        bad = {ext: n for ext, n in sorted(found.items()) if ext not in allowed}
        libraries.append(Library(str(path.relative_to(root)), label, dict(sorted(found.items())),
                                 {} if reason else bad, result.ymm, reason if bad else None,
                                 aliases[path]))
    return libraries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="a bundle, or any folder of shared objects")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder")
    libraries = check(args.folder, args.jobs)
    violations = [lib for lib in libraries if lib.violations]
    report = {
        "folder": str(args.folder),
        "libraries_checked": len(libraries),
        "violations": {lib.path: lib.violations for lib in violations},
        "allowlisted": {lib.path: {"reason": lib.allowlisted, "found": lib.found}
                        for lib in libraries if lib.allowlisted},
        "libraries": [lib.__dict__ for lib in libraries],
        "ok": not violations,
    }
    json.dump(report, sys.stdout, indent=1)
    print()
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
