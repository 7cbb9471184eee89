"""The llama.cpp CPU variant a bundle loads, from real /proc/cpuinfo samples (tests/unit/data/
cpuinfo): this machine's Zen 4 EPYC; an i7-4770 (Haswell, AVX2 only); the same chip in a VM
that hides FMA, F16C and BMI2; a Xeon Gold 6248 (Cascade Lake: AVX-512 with VNNI, no VBMI); a
Xeon Platinum 8480+ (Sapphire Rapids) under KVM; and a Raspberry Pi 5 (ARM `Features` line).
The variants folder is laid out as packaging/llama_cpp_portable.sh writes it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from backends.llamacpp import cpu_variant
from backends.llamacpp.cpu_variant import (
    FORCE_ENV,
    LIB_PATH_ENV,
    VariantError,
    apply,
    choose,
    cpu_flags_from,
    load_variants,
)

SAMPLES = Path(__file__).parent / "data" / "cpuinfo"
BASELINE = ["avx", "avx2", "fma", "f16c", "bmi2", "sse4_2"]
V4 = ["avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"]


def flags(sample: str) -> frozenset[str]:
    return cpu_flags_from((SAMPLES / f"{sample}.txt").read_text(encoding="utf-8"))


def write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")


@pytest.fixture
def variants(tmp_path: Path) -> Path:
    """A shipped variants folder: the baseline's requirements and two AVX-512 builds."""
    folder = tmp_path / "llama_cpp" / "variants"
    write(folder / "baseline.json", {"name": "baseline", "rank": 0, "requires": BASELINE})
    write(folder / "avx512" / "variant.json",
          {"name": "avx512", "rank": 10, "requires": BASELINE + V4})
    write(folder / "avx512_vnni" / "variant.json",
          {"name": "avx512_vnni", "rank": 20,
           "requires": BASELINE + V4 + ["avx512vbmi", "avx512_vnni"]})
    for name in ("avx512", "avx512_vnni"):  # each variant is its CPU backend module
        (folder / name / "libggml-cpu.so").write_bytes(b"\x7fELF")
    return folder


def chosen(folder: Path, sample: str, forced: str | None = None) -> str:
    baseline, found = load_variants(folder)
    return choose(baseline, found, flags(sample), forced).variant.name


def test_cpuinfo_flags_come_from_the_flags_line_on_x86_and_features_on_arm():
    zen4 = flags("zen4_epyc_genoa")
    assert {"avx2", "avx512f", "avx512_vnni", "avx512_bf16"} <= zen4
    assert "amx_tile" not in zen4
    assert "amx_tile" in flags("sapphire_rapids_kvm")
    assert flags("raspberry_pi5_cortex_a76") == {
        "fp", "asimd", "evtstrm", "aes", "pmull", "sha1", "sha2", "crc32", "atomics", "fphp",
        "asimdhp", "cpuid", "asimdrdm", "lrcpc", "dcpop", "asimddp"}
    assert cpu_flags_from("processor\t: 0\nmodel name\t: a CPU that lists none\n") == frozenset()


@pytest.mark.parametrize(("sample", "expected"), [
    ("haswell_i7_4770", "baseline"),
    ("cascade_lake_gold_6248", "avx512"),  # VNNI but no VBMI
    ("zen4_epyc_genoa", "avx512_vnni"),
    ("sapphire_rapids_kvm", "avx512_vnni"),
])
def test_the_best_variant_whose_flags_the_cpu_has_is_chosen(variants: Path, sample: str,
                                                            expected: str):
    assert chosen(variants, sample) == expected


def test_the_reason_names_what_the_cpu_lacks_for_each_faster_build(variants: Path):
    baseline, found = load_variants(variants)
    choice = choose(baseline, found, flags("haswell_i7_4770"))
    assert choice.variant.path is None
    assert "avx512 needs avx512bw avx512cd avx512dq avx512f avx512vl" in choice.reason
    picked = choose(baseline, found, flags("zen4_epyc_genoa"))
    assert picked.variant.path == variants / "avx512_vnni"
    assert picked.reason == ("the CPU has avx512_vnni avx512bw avx512cd avx512dq avx512f "
                             "avx512vbmi avx512vl")


def test_a_cpu_below_the_baseline_is_a_clear_error_not_a_crash_later(variants: Path):
    # A hypervisor that hides FMA, F16C and BMI2: the baseline's FMA code would die (SIGILL).
    with pytest.raises(VariantError, match=r"this CPU lacks bmi2 f16c fma, which Ember's "
                                           r"llama.cpp needs \(x86-64-v3"):
        chosen(variants, "haswell_vm_masked")


def test_the_chooser_is_not_tied_to_x86(tmp_path: Path):
    folder = tmp_path / "arm"
    write(folder / "baseline.json", {"name": "baseline", "rank": 0, "requires": ["asimd"]})
    write(folder / "sve" / "variant.json", {"name": "sve", "rank": 10,
                                            "requires": ["asimd", "sve"]})
    write(folder / "dotprod" / "variant.json", {"name": "dotprod", "rank": 5,
                                                "requires": ["asimd", "asimddp"]})
    assert chosen(folder, "raspberry_pi5_cortex_a76") == "dotprod"


def test_an_x86_build_on_an_arm_cpu_says_what_is_missing(variants: Path):
    with pytest.raises(VariantError, match="this CPU lacks avx avx2 bmi2 f16c fma sse4_2"):
        chosen(variants, "raspberry_pi5_cortex_a76")


def test_unknown_cpu_flags_keep_the_baseline(variants: Path):
    baseline, found = load_variants(variants)
    choice = choose(baseline, found, None)
    assert (choice.variant.name, choice.reason) == ("baseline", "CPU flags unknown on this system")


def test_forcing_a_variant_by_name(variants: Path):
    assert chosen(variants, "zen4_epyc_genoa", forced="avx512") == "avx512"
    assert chosen(variants, "zen4_epyc_genoa", forced="baseline") == "baseline"
    with pytest.raises(VariantError, match=r"EMBER_LLAMA_VARIANT=avx512: this CPU lacks "
                                           r"avx512bw avx512cd avx512dq avx512f avx512vl"):
        chosen(variants, "haswell_i7_4770", forced="avx512")
    with pytest.raises(VariantError, match=r"EMBER_LLAMA_VARIANT='avx2' is not a llama.cpp "
                                           r"build shipped here; choose one of baseline, "
                                           r"avx512, avx512_vnni"):
        chosen(variants, "zen4_epyc_genoa", forced="avx2")


def test_a_damaged_variant_description_names_its_file(variants: Path):
    (variants / "avx512" / "variant.json").write_text('{"name": "avx512", "requires": "avx512f"}')
    with pytest.raises(VariantError, match=r"avx512/variant.json: 'requires' is not a list"):
        load_variants(variants)
    (variants / "avx512" / "variant.json").write_text("{not json")
    with pytest.raises(VariantError, match=r"avx512/variant.json does not read"):
        load_variants(variants)


def test_apply_chooses_the_variant_s_cpu_module_and_logs_why(
        variants: Path, caplog: pytest.LogCaptureFixture):
    environ: dict[str, str] = {}
    with caplog.at_level(logging.INFO, logger=cpu_variant.__name__):
        choice = apply(environ, variants, flags("cascade_lake_gold_6248"))
    assert choice is not None and choice.library == variants / "avx512" / "libggml-cpu.so"
    assert environ == {}  # llama_cpp keeps its own lib folder; only the CPU module differs
    assert ("llama.cpp CPU build: avx512 (the CPU has avx512bw avx512cd avx512dq avx512f "
            "avx512vl)") in caplog.messages


def test_apply_leaves_the_baseline_in_place(variants: Path):
    choice = apply({}, variants, flags("haswell_i7_4770"))
    assert choice is not None and choice.variant.name == "baseline"
    assert choice.library is None  # the lib folder's own libggml-cpu.so


def test_an_explicit_library_path_wins(variants: Path):
    environ = {LIB_PATH_ENV: "/opt/my-llama/lib", FORCE_ENV: "avx512"}
    assert apply(environ, variants, flags("zen4_epyc_genoa")) is None
    assert environ[LIB_PATH_ENV] == "/opt/my-llama/lib"


def test_forcing_through_the_environment(variants: Path):
    choice = apply({FORCE_ENV: "avx512"}, variants, flags("sapphire_rapids_kvm"))
    assert choice is not None and choice.library == variants / "avx512" / "libggml-cpu.so"
    with pytest.raises(VariantError, match="is not a llama.cpp build shipped here"):
        apply({FORCE_ENV: "avx10"}, variants, flags("sapphire_rapids_kvm"))


def test_a_development_install_without_variants_keeps_its_own_build(tmp_path: Path):
    environ: dict[str, str] = {}
    assert apply(environ, tmp_path / "no-variants-here", flags("zen4_epyc_genoa")) is None
    assert environ == {}


def test_a_variant_folder_without_its_module_is_a_clear_error(variants: Path):
    (variants / "avx512_vnni" / "libggml-cpu.so").unlink()
    with pytest.raises(VariantError, match=r"avx512_vnni has no libggml-cpu.so in "):
        apply({}, variants, flags("zen4_epyc_genoa"))
