"""packaging/check_instructions.py: what it counts in real objdump output, and its verdict on
small shared objects gcc builds here for each instruction set (the real llama.cpp builds are
checked in tests/integration/test_llama_portable.py)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "packaging" / "check_instructions.py"
_spec = importlib.util.spec_from_file_location("check_instructions", SCRIPT)
assert _spec is not None and _spec.loader is not None
check_instructions = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = check_instructions  # dataclasses look their module up there
_spec.loader.exec_module(check_instructions)
classify = check_instructions.classify

SOURCE = """
#include <immintrin.h>
#include <stddef.h>
void axpy(float *y, const float *x, float a, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}
"""
AVX512 = SOURCE + "__m512 add16(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }\n"
VNNI = SOURCE + ("__m256i dot(__m256i s, __m256i a, __m256i b) "
                 "{ return _mm256_dpbusd_epi32(s, a, b); }\n")
AVX_VNNI = SOURCE + ("__m256i dot(__m256i s, __m256i a, __m256i b) "
                     "{ return _mm256_dpbusd_avx_epi32(s, a, b); }\n")
AMX = SOURCE + "void load(const void *cfg) { _tile_loadconfig(cfg); }\n"


def build(folder: Path, name: str, source: str, *flags: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / f"{name}.c"
    src.write_text(source, encoding="utf-8")
    out = folder / name
    subprocess.run(["gcc", "-O3", "-shared", "-fPIC", *flags, "-o", str(out), str(src)],
                   check=True)
    src.unlink()
    return out


def run_check(folder: Path) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, str(SCRIPT), str(folder)], capture_output=True,
                          text=True)
    return done.returncode, json.loads(done.stdout)


def line(text: str) -> str:
    return f"  1100:\t{text}"


@pytest.mark.parametrize(("text", "expected"), [
    ("vaddps %zmm1,%zmm0,%zmm0", "avx512"),
    ("vmovaps %xmm17,%xmm0", "avx512"),
    ("vpcmpeqd %ymm1,%ymm2,%k1", "avx512"),
    ("vaddps %ymm1,%ymm2,%ymm3{%k1}{z}", "avx512"),
    ("vbroadcastss (%rax){1to8},%ymm0", "avx512"),
    ("{evex} vpaddd %ymm1,%ymm2,%ymm3", "avx512"),
    ("vpternlogd $0x96,%ymm2,%ymm1,%ymm0", "avx512"),
    ("vpmovdb %ymm0,%xmm0", "avx512"),
    ("vpermt2w %ymm2,%ymm1,%ymm0", "avx512"),
    ("vcvttps2uqq %xmm0,%ymm1", "avx512"),
    ("kmovw %eax,%k1", "avx512"),
    ("vpdpbusd %ymm2,%ymm1,%ymm0", "avx512_vnni"),
    ("{vex} vpdpbusd %ymm2,%ymm1,%ymm0", "avx_vnni"),
    ("vpermb %zmm2,%zmm1,%zmm0", "avx512vbmi"),
    ("vdpbf16ps %zmm2,%zmm1,%zmm0", "avx512_bf16"),
    ("vaddph %zmm2,%zmm1,%zmm0", "avx512_fp16"),
    ("tileloadd (%rax,%rbx,1),%tmm0", "amx_tile"),
    ("tdpbssd %tmm2,%tmm1,%tmm0", "amx_int8"),
    ("vgf2p8affineqb $0x0,%ymm0,%ymm2,%ymm0", "gfni"),
    ("vaesenc %ymm1,%ymm2,%ymm3", "vaes"),
    ("aesenc %xmm1,%xmm2", "aes"),
    ("sha256rnds2 %xmm0,%xmm1,%xmm2", "sha_ni"),
    ("adcx %rax,%rbx", "adx"),
    # x86-64-v3 (AVX2, FMA, F16C, BMI2), which must not be flagged:
    ("vfmadd231ps %ymm1,%ymm2,%ymm3", None),
    ("vpmovzxbw %xmm0,%ymm1", None),
    ("vpmovmskb %ymm0,%eax", None),
    ("vpcmpeqd %ymm1,%ymm2,%ymm3", None),
    ("vcvtps2ph $0x0,%ymm0,%xmm1", None),
    ("vcvtph2ps %xmm0,%ymm1", None),
    ("vgatherdps %ymm2,(%rax,%ymm1,4),%ymm0", None),
    ("vphaddd %ymm1,%ymm2,%ymm3", None),
    ("shlx %rax,%rbx,%rcx", None),
    ("lock cmpxchg %rcx,(%rdx)", None),
    ("cs nopw 0x0(%rax,%rax,1)", None),
])
def test_each_instruction_is_named_by_the_extension_it_needs(text: str, expected: str | None):
    assert classify(line(text)) == expected


def test_lines_that_are_not_instructions_are_ignored():
    assert classify("0000000000001100 <add16>:") is None
    assert classify("Disassembly of section .text:") is None
    assert classify("  1100:\t(bad)") is None


def test_an_avx512_library_fails_the_x86_64_v3_check(tmp_path: Path):
    build(tmp_path / "bundle", "libfast.so", AVX512, "-mavx512f")
    code, report = run_check(tmp_path / "bundle")
    assert code == 1 and not report["ok"]
    assert set(report["violations"]) == {"libfast.so"}
    assert report["violations"]["libfast.so"]["avx512"] >= 1


def test_an_avx2_fma_library_passes_and_its_ymm_code_is_counted(tmp_path: Path):
    build(tmp_path / "bundle", "libv3.so", SOURCE, "-mavx2", "-mfma", "-mf16c", "-mbmi2")
    code, report = run_check(tmp_path / "bundle")
    assert (code, report["violations"]) == (0, {})
    [lib] = report["libraries"]
    assert lib["found"] == {} and lib["ymm_instructions"] > 0


def test_amx_is_found(tmp_path: Path):
    build(tmp_path / "bundle", "libtile.so", AMX, "-mamx-tile")
    code, report = run_check(tmp_path / "bundle")
    assert code == 1 and report["violations"]["libtile.so"] == {"amx_tile": 1}


def write_variant(folder: Path, name: str, requires: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "variant.json").write_text(json.dumps({"name": name, "rank": 1,
                                                     "requires": requires}))


V4 = ["avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512cd", "avx512bw", "avx512dq",
      "avx512vl"]


def test_a_variant_folder_is_held_to_the_flags_it_declares(tmp_path: Path):
    bundle = tmp_path / "bundle"
    write_variant(bundle / "variants" / "avx512", "avx512", V4)
    build(bundle / "variants" / "avx512", "libfast.so", AVX512, "-mavx512f")
    code, report = run_check(bundle)
    assert (code, report["violations"]) == (0, {})
    assert report["libraries"][0]["checked_against"] == "variant avx512"

    # VNNI code in a folder that promises only AVX-512's core is a violation...
    build(bundle / "variants" / "avx512", "libdot.so", VNNI, "-mavx512f", "-mavx512vl",
          "-mavx512vnni")
    code, report = run_check(bundle)
    assert code == 1
    assert report["violations"] == {"variants/avx512/libdot.so": {"avx512_vnni": 1}}
    # ... and fine where the folder declares it.
    write_variant(bundle / "variants" / "avx512", "avx512", V4 + ["avx512_vnni"])
    assert run_check(bundle)[0] == 0


def test_avx_vnni_is_not_avx512_vnni(tmp_path: Path):
    bundle = tmp_path / "bundle"
    write_variant(bundle, "avx512_vnni", V4 + ["avx512_vnni"])
    build(bundle, "libdot.so", AVX_VNNI, "-mavxvnni")
    code, report = run_check(bundle)
    assert code == 1 and report["violations"] == {"libdot.so": {"avx_vnni": 1}}


def test_allowlisted_libraries_are_reported_with_their_reason_not_failed(tmp_path: Path):
    bundle = tmp_path / "bundle"
    build(bundle / "numpy" / "_core", "_multiarray_umath.cpython-311-x86_64-linux-gnu.so",
          AVX512, "-mavx512f")
    code, report = run_check(bundle)
    assert (code, report["violations"]) == (0, {})
    entry = report["allowlisted"]["numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so"]
    assert entry["reason"].startswith("numpy:") and entry["found"]["avx512"] >= 1


def test_a_folder_pattern_allows_only_the_library_at_that_path(tmp_path: Path):
    """cryptography's `_rust.abi3.so` is allowlisted by its folder: another extension of that
    generic name elsewhere is still held to the baseline."""
    bundle = tmp_path / "bundle"
    build(bundle / "cryptography" / "hazmat" / "bindings", "_rust.abi3.so", AVX512, "-mavx512f")
    build(bundle / "other", "_rust.abi3.so", AVX512 + "int other(void) { return 1; }\n",
          "-mavx512f")  # not a copy of the first (copies are checked once)
    code, report = run_check(bundle)
    assert code == 1 and list(report["violations"]) == ["other/_rust.abi3.so"]
    entry = report["allowlisted"]["cryptography/hazmat/bindings/_rust.abi3.so"]
    assert entry["reason"].startswith("cryptography")


def test_copies_and_symlinks_are_checked_once_and_listed_as_aliases(tmp_path: Path):
    bundle = tmp_path / "bundle"
    real = build(bundle, "libv3.so.0.1.0", SOURCE, "-mavx2")
    (bundle / "libv3.so.0").symlink_to(real.name)
    (bundle / "libv3.so").write_bytes(real.read_bytes())  # as a wheel holds it: a copy
    code, report = run_check(bundle)
    assert code == 0 and report["libraries_checked"] == 1
    assert sorted(report["libraries"][0]["aliases"]) == ["libv3.so.0", "libv3.so.0.1.0"]
