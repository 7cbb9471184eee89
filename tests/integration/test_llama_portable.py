"""The portable llama.cpp a bundle ships (packaging/llama_cpp_portable.sh, built here on first
use: about 6 minutes on 2 cores, then cached): its instruction check against the native dev
build, and the bundle layout choosing and loading a variant's CPU backend module in a fresh
process, as the engine's worker does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from app.store import InstalledModel
from backends.llamacpp import cpu_variant

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "packaging" / "check_instructions.py"


@pytest.fixture(scope="session")
def portable() -> Path:
    done = subprocess.run(["bash", str(ROOT / "packaging" / "llama_cpp_portable.sh"),
                           sys.executable], check=True, capture_output=True, text=True,
                          timeout=3600)
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def site(portable: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The portable llama_cpp package as a bundle holds it: the wheel's package, and the
    variants beside its lib folder (cpu_variant's documented place)."""
    site = tmp_path_factory.mktemp("bundle-site")
    with zipfile.ZipFile(next(portable.glob("llama_cpp_python-*.whl"))) as wheel:
        wheel.extractall(site, [n for n in wheel.namelist() if n.startswith("llama_cpp/")])
    shutil.copytree(portable / "variants", site / "llama_cpp" / "variants", symlinks=True)
    return site


def check(folder: Path) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, str(CHECK), str(folder)], capture_output=True,
                          text=True, timeout=600)
    return done.returncode, json.loads(done.stdout)


def by_path(report: dict) -> dict[str, dict]:
    return {lib["path"]: lib for lib in report["libraries"]}


def test_an_avx512_library_outside_a_variant_folder_fails(portable: Path, tmp_path: Path):
    """Checked against x86-64-v3: a library built with known instructions (the avx512
    variant's libggml-cpu), not whatever this machine's own build holds, so it fails alike on
    AVX2-only, AVX-512 and AMX machines."""
    shutil.copy(portable / "variants" / "avx512" / "libggml-cpu.so", tmp_path)
    code, report = check(tmp_path)
    assert code == 1
    assert set(report["violations"]["libggml-cpu.so"]) == {"avx512"}
    assert report["violations"]["libggml-cpu.so"]["avx512"] > 10_000


def test_the_portable_bundle_passes_with_each_variant_held_to_its_flags(site: Path):
    code, report = check(site)
    assert (code, report["violations"], report["allowlisted"]) == (0, {}, {})
    libs = by_path(report)
    # the Vulkan backend is held to x86-64-v3 too (its GPU code is SPIR-V data)
    assert libs["llama_cpp/lib/libggml-vulkan.so"]["found"] == {}
    baseline = libs["llama_cpp/lib/libggml-cpu.so"]
    # x86-64-v3 for real, not ggml's silent fall back to SSE: AVX2 code, nothing past it
    assert baseline["found"] == {} and baseline["ymm_instructions"] > 1000
    avx512 = libs["llama_cpp/variants/avx512/libggml-cpu.so"]
    assert avx512["checked_against"] == "variant avx512"
    assert set(avx512["found"]) == {"avx512"} and avx512["found"]["avx512"] > 10_000
    vnni = libs["llama_cpp/variants/avx512_vnni/libggml-cpu.so"]
    assert vnni["found"]["avx512_vnni"] > 100
    assert set(vnni["found"]) <= {"avx512", "avx512_vnni", "avx512vbmi"}


def test_a_variant_library_in_a_folder_promising_less_fails(portable: Path, tmp_path: Path):
    shutil.copy(portable / "variants" / "avx512" / "variant.json", tmp_path)
    shutil.copy(portable / "variants" / "avx512_vnni" / "libggml-cpu.so", tmp_path)
    code, report = check(tmp_path)
    assert code == 1
    assert set(report["violations"]["libggml-cpu.so"]) == {"avx512_vnni", "avx512vbmi"}


PROBE = """
import json, os, sys
import backends.llamacpp
from backends.llamacpp import ggml_backends
import llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=128, verbose=False)
llm.eval(llm.tokenize(b"def fibonacci(n):", add_bos=False))
scores = llm.scores[llm.n_tokens - 1]
print(json.dumps({"lib": str(llama_cpp.llama_cpp._base_path),
                  "cpu": ggml_backends.load_backends(gpu=False).loaded[0],
                  "system_info": llama_cpp.llama_print_system_info().decode(),
                  "top": [int(i) for i in scores.argsort()[::-1][:5]],
                  "max_logit": float(scores.max())}))
"""


def probe(site: Path, model: InstalledModel, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("LLAMA_CPP_LIB_PATH", "EMBER_LLAMA_VARIANT")}
    environ.update(env, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))
    done = subprocess.run([sys.executable, "-c", PROBE, str(model.path)], env=environ,
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_bundle_loads_the_variant_this_cpu_runs_best_and_it_computes_the_same(
        site: Path, qwen: InstalledModel):
    baseline, variants = cpu_variant.load_variants(site / "llama_cpp" / "variants")
    expected = cpu_variant.choose(baseline, variants, cpu_variant.cpu_flags()).variant

    lib = str(site / "llama_cpp" / "lib")
    chosen = probe(site, qwen)
    assert chosen["lib"] == lib  # the wheel's own libllama and libggml, whatever the CPU
    if expected.path is None:  # a CPU without AVX-512: the lib folder's CPU backend
        assert chosen["cpu"] == "lib/libggml-cpu.so"
    else:  # this machine (an AVX-512 Xeon or Zen 4): avx512_vnni
        assert chosen["cpu"] == f"variants/{expected.name}/libggml-cpu.so"
        assert "AVX512 = 1" in chosen["system_info"]

    forced = probe(site, qwen, EMBER_LLAMA_VARIANT="baseline")
    assert forced["lib"] == lib and forced["cpu"] == "lib/libggml-cpu.so"
    assert "AVX2 = 1" in forced["system_info"] and "AVX512" not in forced["system_info"]

    # the variant's CPU module works with the wheel's libllama: same next-token ranking
    assert chosen["top"][:3] == forced["top"][:3]
    assert abs(chosen["max_logit"] - forced["max_logit"]) < 0.5


def test_an_unknown_forced_variant_fails_the_import_clearly(site: Path):
    environ = {k: v for k, v in os.environ.items() if k != "LLAMA_CPP_LIB_PATH"}
    environ.update(EMBER_LLAMA_VARIANT="avx1024", PYTHONPATH=f"{site}{os.pathsep}{ROOT}")
    done = subprocess.run([sys.executable, "-c", "import backends.llamacpp"], env=environ,
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert ("VariantError: EMBER_LLAMA_VARIANT='avx1024' is not a llama.cpp build shipped "
            "here; choose one of baseline, avx512, avx512_vnni") in done.stderr
