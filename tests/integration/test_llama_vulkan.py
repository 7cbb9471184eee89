"""llama.cpp's Vulkan backend, loaded at run time (GGML_BACKEND_DL), on Mesa's lavapipe: a
real Vulkan 1.3 device that runs on the CPU, so this machine without a GPU runs the same GPU
code path a Radeon, an Arc or a GeForce would (packaging/system_packages.sh installs it,
packaging/llama_cpp_portable.sh builds the backend).

ggml leaves CPU-type Vulkan devices out unless they are named, so the tests name lavapipe with
GGML_VK_VISIBLE_DEVICES=0; a user's machine never offloads to it by itself. Everything that
loads the Vulkan backend runs in a child process (the engine's worker, or `python -m`), as in
the app.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.fit.estimate import file_estimate
from app.gguf_file import read_gguf
from app.hardware import GPU, MAX_STORAGE_BUFFER
from app.runtime import Runtime, gpu_devices
from app.runtime.gpu_devices import GgmlDevice, ask, why_skip
from app.server.app import create_app
from backends.base import GenerationRequest, LoadPlan, Message, SamplingParams
from backends.llamacpp.backend import LlamaCppBackend
from backends.llamacpp.ggml_backends import lib_dir
from tests.support import LOOPBACK, REPO
from tests.support.agreement import TIE_TOLERANCE, forced_through
from tests.support.machines import profile
from tests.support.offload_agreement import CONTEXT, LAVAPIPE_PROMPT

GiB = 2**30
# lavapipe as app.hardware lists it (2 GiB heap, 128 MiB storage buffer range)
LAVAPIPE_GPU = GPU("llvmpipe (LLVM 15.0.6, 256 bits)", "lavapipe", 2 * GiB, 2 * GiB, None, 30,
                   max_tensor_bytes=MAX_STORAGE_BUFFER["lavapipe"])

LAVAPIPE = {"GGML_VK_VISIBLE_DEVICES": "0"}
# Real text for the teacher-forced comparison: about 120 tokens of this repository's code
# (with one layer on lavapipe, about 20 s on 2 cores: tests/support/offload_agreement.py).
TEXT = (REPO / "backends" / "text.py").read_text()[:500]


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GGML_VK_VISIBLE_DEVICES", "VK_ICD_FILENAMES", "EMBER_GPU")}
    env.update(extra)
    return env


def device_report(**extra: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "backends.llamacpp.device_report"],
                         env=child_env(**extra), cwd=REPO, capture_output=True, text=True,
                         timeout=300, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def check_as_on_the_cpu(qwen, request: GenerationRequest, answer: str) -> None:
    """`answer` is the CPU's greedy answer up to near-ties: each of its tokens, forced through
    the CPU backend in this process, is the top choice or within tests/support/agreement.py's
    tolerance."""
    cpu = LlamaCppBackend()
    cpu.load(qwen, LoadPlan(context=512, threads=2))
    try:
        prompt, _, _ = cpu.prompt_tokens(request)
        forced_through(cpu, prompt + cpu.tokenize(answer), len(prompt)).check()
    finally:
        cpu.unload()


def test_the_build_loads_its_backends_at_run_time_with_vulkan_among_them():
    assert (lib_dir() / "libggml-vulkan.so").is_file(), "the set-up built no Vulkan backend"
    report = device_report(**LAVAPIPE)
    assert report["dynamic"] and report["failed"] == []
    assert "lib/libggml-vulkan.so" in report["loaded"]
    assert any(name.endswith("libggml-cpu.so") for name in report["loaded"])
    vulkan = [d for d in report["devices"] if d["backend"] == "Vulkan"]
    assert len(vulkan) == 1 and vulkan[0]["name"] == "Vulkan0"
    assert "llvmpipe" in vulkan[0]["description"] and vulkan[0]["memory_total"] > 1 << 30
    # its bandwidth, from a copy on the device (lavapipe's memory is the RAM: GB/s of a
    # memcpy, best of 5)
    assert set(report["copy_gbps"]) == {"Vulkan0"} and report["copy_gbps"]["Vulkan0"] > 1.0


def test_without_a_gpu_or_with_ember_gpu_off_the_cpu_runs_alone():
    # lavapipe not named: ggml's Vulkan backend loads and finds no device of its own
    report = device_report()
    assert [d["backend"] for d in report["devices"]] == ["CPU"] and report["failed"] == []
    off = device_report(EMBER_GPU="off", **LAVAPIPE)
    assert off["gpu_off"] and not any("vulkan" in name for name in off["loaded"])
    assert [d["backend"] for d in off["devices"]] == ["CPU"]


def test_a_broken_vulkan_driver_is_one_line_and_the_cpu_carries_on(tmp_path: Path):
    report = device_report(VK_ICD_FILENAMES=str(tmp_path / "no-such-driver.json"), **LAVAPIPE)
    assert [d["backend"] for d in report["devices"]] == ["CPU"]
    assert report["failed"] == ["libggml-vulkan.so: ggml could not register it (its device "
                                "failed to start)"]


def test_a_gpu_module_downloaded_into_the_data_folder_is_loaded(tmp_path: Path):
    """`ember cuda install`'s whole path with a module that runs here: the build's real
    Vulkan module, published as a release publishes the CUDA one (manifest and file on a
    local server), installed by the command into a data folder, then loaded from there by a
    llama.cpp whose own lib folder lacks it, and lavapipe found through it."""
    import hashlib
    import shutil

    import llama_cpp

    from backends.gpu_modules import this_platform
    from tests.support.cli import ember
    from tests.support.package_index import IndexedFile, serve_index

    module = (lib_dir() / "libggml-vulkan.so").read_bytes()
    manifest = {"format": 1, "backend": "vulkan", "llama_cpp_version": llama_cpp.__version__,
                "platform": this_platform(), "module": {
                    "file": "libggml-vulkan.so", "url": "libggml-vulkan-test.so",
                    "sha256": hashlib.sha256(module).hexdigest(), "bytes": len(module)}}
    lib = tmp_path / "lib"  # the build without its Vulkan module
    shutil.copytree(lib_dir(), lib, ignore=shutil.ignore_patterns("libggml-vulkan.so"))
    home = tmp_path / "home"
    with serve_index() as index:
        index.add("release", IndexedFile("libggml-vulkan-test.so", module))
        index.add("release", IndexedFile("cuda-module.json", json.dumps(manifest).encode()))
        done = ember("cuda", "install", "--from", f"{index.url}/files/cuda-module.json",
                     env={"EMBER_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    installed = home / "llama-modules" / "vulkan" / "libggml-vulkan.so"
    assert installed.read_bytes() == module
    report = device_report(LLAMA_CPP_LIB_PATH=str(lib), EMBER_HOME=str(home),
                           EMBER_LLAMA_MODULES=str(home / "llama-modules"), **LAVAPIPE)
    assert str(installed) in report["loaded"] and report["failed"] == []
    assert [d["backend"] for d in report["devices"]] == ["CPU", "Vulkan"]
    without = device_report(LLAMA_CPP_LIB_PATH=str(lib), **LAVAPIPE)
    assert [d["backend"] for d in without["devices"]] == ["CPU"]


def test_the_app_asks_a_child_and_finds_lavapipe(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GGML_VK_VISIBLE_DEVICES", "0")
    assert why_skip() is None
    report = ask()
    assert report.error is None and len(report.devices) == 1
    device = report.devices[0]
    assert isinstance(device, GgmlDevice) and device.vendor == "lavapipe"
    assert device.backend == "Vulkan" and device.type == "gpu"
    assert device.copy_gbps is not None and device.copy_gbps > 1.0
    monkeypatch.delenv("GGML_VK_VISIBLE_DEVICES")
    if not any(Path("/dev").glob("dri/renderD*")):
        assert why_skip() == "no GPU device on this system (/dev/dri, /dev/nvidia*)"
    monkeypatch.setenv("EMBER_GPU", "off")
    assert why_skip() == "EMBER_GPU=off"


def test_a_layer_of_the_0_5b_on_vulkan_agrees_with_the_cpu_and_buffers_are_as_planned(
        qwen, tmp_path: Path):
    """Teacher-forced: each position's top token over about 120 tokens of real code, with
    one repeating layer on lavapipe (n_gpu_layers 2: the split path, both devices and the
    copies between them; the 0.5B's output shares the token embedding, which stays on the
    CPU), against the CPU. Every layer, and 12 of them, are only loaded here, for their
    buffers: lavapipe takes about 75 ms per token and layer; the two-GPU test below answers
    through layers on lavapipe, and the bundle's Vulkan test with every layer there."""
    text = tmp_path / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "tests.support.offload_agreement",
                          str(qwen.path), str(text), "0", "2", "load:12", "load:-1"],
                         env=child_env(**LAVAPIPE), cwd=REPO, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["devices"] == ["CPU", "Vulkan0"] and report["failed"] == []
    cpu = report["top"]["0"]
    assert len(cpu) >= 100
    # At least 99% of positions agree, where a near-tie (the Vulkan run's top token within
    # tests/support/agreement.py's tolerance of the CPU's top logit) counts as agreeing: the
    # two devices round differently, as the AVX2 and AVX-512 CPU builds do. Measured on an
    # AMD EPYC (AVX2 build): 99.16% exact top-1 of 119 tokens, the one miss 0.057 below the
    # CPU's top logit (before: 98.65% of 222 tokens with 12 layers and with all of them, the
    # 3 misses 0.01-0.06 below).
    split = report["top"]["2"]
    same = sum(a == b for a, b in zip(cpu, split, strict=True)) / len(cpu)
    gaps = report["gaps"]["2"]
    near = sum(g < TIE_TOLERANCE for g in gaps) / len(gaps)
    print(f"1 layer on Vulkan: top-1 agreement {same:.2%} of {len(cpu)} tokens, "
          f"{near:.2%} up to near-ties; gaps of the misses "
          f"{[round(g, 3) for g in gaps if g > 0]}")
    assert near >= 0.99 and same >= 0.97, (same, near, gaps)
    assert set(report["top"]) == {"0", "2"}  # 12 and all layers were loaded, not evaluated
    # The memory llama.cpp put on the device (its logged model, KV and compute buffers) is
    # within 10% of the fit model's plan for the same load: n_gpu_layers 12 is 11 repeating
    # layers and the output (app.fit.offload).
    info = read_gguf(qwen.path)
    hw = profile(32 * GiB, 24e9, 2, 30, (LAVAPIPE_GPU,))
    for count, repeating in (("-1", 24), ("12", 11)):
        device = report["buffers"][count]["Vulkan0"]
        measured = sum(device.values()) * 2**20
        planned = file_estimate(info, hw, CONTEXT, gpu_layers=repeating).gpu_bytes
        print(f"{count}: Vulkan0 {device} = {measured / 2**20:.1f} MiB, "
              f"planned {planned / 2**20:.1f} MiB")
        assert abs(planned - measured) <= 0.10 * measured, (count, device, planned)
    # and a plan of no layers puts nothing there, as it counts (no op offload either)
    assert "Vulkan0" not in report["buffers"]["0"], report["buffers"]["0"]


def test_a_plan_for_the_gpu_runs_on_the_cpu_and_says_so_when_the_gpu_is_gone(
        store, qwen, monkeypatch: pytest.MonkeyPatch):
    """The plan put every layer on the GPU, but the worker finds none (here EMBER_GPU=off
    reaches it, as a driver that went away would): the model loads on the CPU, the plan it
    runs says so, and it answers."""
    monkeypatch.setenv("EMBER_GPU", "off")  # the worker inherits it
    request = GenerationRequest(messages=(Message("user", "Say hi."),),
                                sampling=SamplingParams(temperature=0, max_tokens=4),
                                speculative=None)
    with Runtime(store=store) as rt:
        loaded = rt.load(qwen.ref, context=512, gpu_layers=-1)
        assert loaded.plan.gpu_layers == 0
        assert "llama.cpp finds no GPU (EMBER_GPU=off): the CPU runs it" in loaded.plan.reason
        assert [lm.plan.gpu_layers for lm in rt.loaded()] == [0]
        assert rt.generate(qwen.ref, request).result()[0]
        # asking again for the same is not a reload (the plan asked for is remembered)
        assert rt.load(qwen.ref, context=512, gpu_layers=-1).pid == loaded.pid


def two_lavapipes(tmp_path: Path) -> dict[str, str]:
    """Two Vulkan devices on this machine: lavapipe's driver listed twice, which the Vulkan
    loader takes as two GPUs (a user's two cards look the same to llama.cpp)."""
    icd = Path("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json")
    copy = tmp_path / "lvp_icd_second.json"
    copy.write_text(icd.read_text())
    return {"VK_ICD_FILENAMES": f"{icd}:{copy}", "GGML_VK_VISIBLE_DEVICES": "0,1"}


def test_a_gpu_that_cannot_hold_the_plan_steps_down_and_says_why(
        store, qwen, monkeypatch: pytest.MonkeyPatch):
    """A real allocation failure on the device: ggml-vulkan refuses any buffer larger than
    GGML_VK_FORCE_MAX_BUFFER_SIZE (its own knob, the check a GPU's maxBufferSize makes), here
    160 MiB, while the device still reports 2 GiB, as a GPU that another program filled after
    the plan was made. Every layer is asked for; the weights' 236 MiB buffer fails,
    the worker steps down to half the layers, which fit, says why in the plan's reason, in
    llama.cpp's words, and answers."""
    monkeypatch.setenv("GGML_VK_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("GGML_VK_FORCE_MAX_BUFFER_SIZE", str(160 << 20))
    monkeypatch.setattr(gpu_devices, "_report", None)  # asked afresh here, restored after
    request = GenerationRequest(prompt=LAVAPIPE_PROMPT,
                                sampling=SamplingParams(temperature=0, max_tokens=2),
                                speculative=None)
    with Runtime(store=store) as rt:
        loaded = rt.load(qwen.ref, context=512, gpu_layers=-1)
        answer = rt.generate(qwen.ref, request).result()[0]
    assert loaded.plan.gpu_layers == 13, loaded.plan
    assert re.search(r"the GPU could not hold the plan \(every layer on the GPU failed: "
                     r"llama.cpp could not allocate a 2\d\d\.\d MiB buffer on Vulkan0\), so "
                     r"llama.cpp runs n_gpu_layers=13", loaded.plan.reason), loaded.plan.reason
    assert answer


def test_two_gpus_split_the_layers_and_ember_answers_as_the_cpu(
        store, qwen, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """llama.cpp's layer split (its default with several devices): every layer offloaded
    lands on the two devices, weights and KV cache on both (loaded for the buffers). Through
    the Runtime's worker, as `ember serve` runs it (the worker loads the GPU backends
    itself), with three repeating layers offloaded, two on one device and one on the other
    (lavapipe takes about 75 ms per token and layer), the greedy answer is the CPU's up to
    near-ties: each of its tokens, forced through the CPU backend, is the top choice or
    within tests/support/agreement.py's tolerance (exact text would differ by CPU at a
    near-tie, as AVX2 and AVX-512 builds do). One GPU through the worker: the bundle's
    test_run_answers_through_the_worker_on_a_vulkan_gpu."""
    env = two_lavapipes(tmp_path)
    assert [d["name"] for d in device_report(**env)["devices"]] == ["CPU", "Vulkan0", "Vulkan1"]
    out = subprocess.run(
        [sys.executable, "-c", "import backends.llamacpp, json, sys\n"
         "from backends.llamacpp.ggml_backends import load_backends\n"
         "from tests.support.offload_agreement import device_buffers\n"
         "load_backends(gpu=True)\n"
         "print(json.dumps([device_buffers(sys.argv[1], n) for n in (-1, 4)]))",
         str(qwen.path)],
        env=child_env(**env), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    buffers, answering = json.loads(out.stdout.splitlines()[-1])
    print(buffers, answering)
    # the load that answers below: n_gpu_layers 4, its three repeating layers on both devices
    assert answering["Vulkan0"]["model"] > 0 and answering["Vulkan1"]["model"] > 0, answering
    for device in ("Vulkan0", "Vulkan1"):
        assert buffers[device]["model"] > 50 and buffers[device]["KV"] > 0, buffers
    # and the two hold, together, what the fit model plans for two such devices (±10%)
    measured = sum(sum(buffers[d].values()) for d in ("Vulkan0", "Vulkan1")) * 2**20
    planned = file_estimate(read_gguf(qwen.path), profile(32 * GiB, 24e9, 2, 30, (
        LAVAPIPE_GPU, LAVAPIPE_GPU)), CONTEXT, gpu_layers=24).gpu_bytes
    print(f"two devices: {measured / 2**20:.1f} MiB, planned {planned / 2**20:.1f} MiB")
    assert abs(planned - measured) <= 0.10 * measured
    for key, value in env.items():
        monkeypatch.setenv(key, value)  # the worker inherits them
    request = GenerationRequest(prompt=LAVAPIPE_PROMPT,
                                sampling=SamplingParams(temperature=0, max_tokens=8),
                                speculative=None)
    monkeypatch.setattr(gpu_devices, "_report", None)  # asked afresh here, restored after
    with Runtime(store=store) as rt, \
            TestClient(create_app(rt), base_url=LOOPBACK) as client:
        assert rt.load(qwen.ref, context=512, gpu_layers=4).plan.gpu_layers == 4
        answer = rt.generate(qwen.ref, request).result()[0]
        # /api/ps: Ollama's size and size_vram (the offloaded layers on the GPUs),
        # and the GPUs with their vendor and the llama.cpp backend that drives them
        ps = client.get("/api/ps").json()["models"]
    assert answer
    assert len(ps) == 1 and 0 < ps[0]["size_vram"] < ps[0]["size"], ps
    assert ps[0]["gpu_layers"] == 4 and ps[0]["backend"] == "llamacpp"
    assert [(g["vendor"], g["backend"]) for g in ps[0]["gpus"]] == [("lavapipe", "Vulkan")] * 2
    for key in env:
        monkeypatch.delenv(key)
    check_as_on_the_cpu(qwen, request, answer)
