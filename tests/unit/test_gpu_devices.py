"""The GPUs llama.cpp's backends report (app.runtime.gpu_devices), as the hardware profile,
`ember hw` and the backend choice take them: vendors from real device names, when the child is not
asked, and AMD/Intel GPUs beside nvidia-smi's. The child itself runs in
tests/integration/test_llama_vulkan.py."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from app import hardware
from app.hardware import GPU, HardwareProfile
from app.runtime import gpu_devices
from app.runtime.backend_choice import choose_backend
from app.runtime.gpu_devices import DeviceReport, GgmlDevice, why_skip


def device(description: str, type_: str = "gpu", memory: int = 16 << 30,
           backend: str = "Vulkan") -> GgmlDevice:
    return GgmlDevice("Vulkan0", description, type_, backend, memory, memory - (1 << 30))


@pytest.mark.parametrize("description, vendor", [
    ("AMD Radeon RX 7800 XT (RADV NAVI32)", "amd"),
    ("AMD Radeon Graphics (RADV GFX1103_R1)", "amd"),
    ("Intel(R) Arc(tm) A770 Graphics (DG2)", "intel"),
    ("Intel(R) Graphics (RPL-P)", "intel"),
    ("NVIDIA GeForce RTX 4070", "nvidia"),
    ("llvmpipe (LLVM 15.0.6, 256 bits)", "lavapipe"),
    ("Apple M3 Max", "apple"),
    ("Moore Threads MTT S80", "other"),
])
def test_the_vendor_comes_from_the_driver_s_device_name(description: str, vendor: str):
    assert device(description).vendor == vendor


def lib_folder(tmp_path: Path, *names: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name in names:
        (tmp_path / name).write_bytes(b"")
    return tmp_path


def test_the_child_is_asked_only_where_it_could_find_a_gpu(tmp_path: Path):
    with_vulkan = lib_folder(tmp_path / "a", "libggml-cpu.so", "libggml-vulkan.so")
    cpu_only = lib_folder(tmp_path / "b", "libggml-cpu.so")
    assert why_skip({"EMBER_GPU": "off"}, with_vulkan) == "EMBER_GPU=off"
    assert why_skip({}, cpu_only) == "this llama.cpp build has no GPU backend"
    # lavapipe named, as the tests do: asked even without a GPU device node
    assert why_skip({"GGML_VK_VISIBLE_DEVICES": "0"}, with_vulkan, "linux") is None
    # Windows and macOS have no /dev/dri to look at: always asked
    assert why_skip({}, with_vulkan, "win32") is None


def profile(*gpus: GPU) -> HardwareProfile:
    return HardwareProfile(os="Linux", machine="x86_64", cpu="Ryzen 7 7700", physical_cores=8,
                           logical_cores=16, isa=("avx2", "avx512f"), ram_total=32 << 30,
                           ram_available=28 << 30, gpus=gpus)


def test_amd_and_intel_gpus_join_the_profile_and_nvidia_smi_keeps_its_own(
        monkeypatch: pytest.MonkeyPatch):
    report = DeviceReport(devices=(device("AMD Radeon RX 7800 XT (RADV NAVI32)"),
                                   device("NVIDIA GeForce RTX 4070", memory=12 << 30),
                                   device("Intel(R) Graphics (RPL-P)", "igpu", 8 << 30)),
                          failed=("libggml-cuda.so: libcudart.so.12: cannot open shared "
                                  "object file: No such file or directory",))
    monkeypatch.setattr(gpu_devices, "_report", report)
    smi = [GPU("NVIDIA GeForce RTX 4070", "nvidia", 12 << 30, 11 << 30, "8.9", 504.0)]
    gpus, notes = hardware._llama_cpp_gpus(smi)
    assert [(g.name, g.vendor, g.llama_backend, g.shared_memory) for g in gpus] == [
        ("AMD Radeon RX 7800 XT (RADV NAVI32)", "amd", "Vulkan", False),
        ("Intel(R) Graphics (RPL-P)", "intel", "Vulkan", True)]
    assert gpus[0].bandwidth_gbps == 624.0 and gpus[0].vram_total == 16 << 30
    assert smi[0].llama_backend == "Vulkan"  # nvidia-smi's card, and what llama.cpp runs it on
    assert notes == ["llama.cpp's GPU backend left out: libggml-cuda.so: libcudart.so.12: "
                     "cannot open shared object file: No such file or directory"]
    # without nvidia-smi, llama.cpp's own NVIDIA device is listed
    gpus, _ = hardware._llama_cpp_gpus([])
    assert [g.vendor for g in gpus] == ["amd", "nvidia", "intel"]


def test_a_probe_that_failed_is_a_note_not_an_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(gpu_devices, "_report", DeviceReport(
        error="the probe died (exit status -11): a GPU driver crashed while starting"))
    assert hardware._llama_cpp_gpus([]) == ([], [
        "llama.cpp's GPUs could not be read: the probe died (exit status -11): a GPU driver "
        "crashed while starting"])


def test_an_amd_gpu_runs_llama_cpp_with_vulkan_and_the_reason_says_so(
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(gpu_devices, "_report", DeviceReport())
    amd = GPU("AMD Radeon RX 7800 XT (RADV NAVI32)", "amd", 16 << 30, 15 << 30,
              llama_backend="Vulkan")
    choice = choose_backend(profile(amd), gpu_offload=True)
    assert (choice.name, choice.reason) == (
        "llamacpp", "AMD Radeon RX 7800 XT (RADV NAVI32) (16 GB): llama.cpp with Vulkan")
    igpu = GPU("Intel(R) Graphics (RPL-P)", "intel", 8 << 30, 8 << 30, llama_backend="Vulkan",
               shared_memory=True)
    assert choose_backend(profile(igpu), gpu_offload=True).reason == (
        "Intel(R) Graphics (RPL-P) (shares the system's memory): llama.cpp with Vulkan")


def test_the_machine_page_lists_every_gpu_with_its_llama_cpp_backend(
        monkeypatch: pytest.MonkeyPatch):
    from app.gui.machine import machine_lines

    monkeypatch.setattr(gpu_devices, "_report", DeviceReport())
    amd = GPU("AMD Radeon RX 7800 XT (RADV NAVI32)", "amd", 16 << 30, 15 << 30,
              llama_backend="Vulkan")
    igpu = GPU("Intel(R) Graphics (RPL-P)", "intel", 8 << 30, 8 << 30, llama_backend="Vulkan",
               shared_memory=True)
    gpus = [text for label, text in machine_lines(profile(amd, igpu)) if label == "GPU"]
    assert gpus == ["AMD Radeon RX 7800 XT (RADV NAVI32) · 17.2 GB VRAM (16.1 GB free) · "
                    "llama.cpp: Vulkan",
                    "Intel(R) Graphics (RPL-P) · shares the system's memory · llama.cpp: Vulkan"]


def test_a_gpu_no_table_knows_gets_the_copy_bandwidth_measured_on_it_and_keeps_the_best(
        monkeypatch: pytest.MonkeyPatch, isolated_home):
    def probe(*devices: GgmlDevice) -> None:
        monkeypatch.setattr(gpu_devices, "_report", DeviceReport(devices=devices))

    unknown = "AMD Radeon RX 7650 GRE (RADV NAVI33)"  # not in the table
    probe(replace(device(unknown), copy_gbps=301.5))
    [gpu], _ = hardware._llama_cpp_gpus([])
    assert (gpu.bandwidth_gbps, gpu.copy_gbps) == (301.5, 301.5)
    assert re.fullmatch(r"302 GB/s \(a copy on it, measured \d{4}-\d\d-\d\d \d\d:\d\d\)",
                        gpu.bandwidth_text())
    # a later copy beside a game reads low: the card keeps its best reading, and when
    probe(replace(device(unknown), copy_gbps=120.0))
    [later], _ = hardware._llama_cpp_gpus([])
    assert (later.bandwidth_gbps, later.copy_measured_at) == (301.5, gpu.copy_measured_at)
    # not measured this time (too little free memory): the kept reading still stands
    probe(device(unknown))
    assert hardware._llama_cpp_gpus([])[0][0].bandwidth_gbps == 301.5
    # a card the table knows keeps the table's figure (the fit model's efficiency is
    # relative to it); the copy shows beside it
    probe(replace(device("AMD Radeon RX 7800 XT (RADV NAVI32)"), copy_gbps=540.0))
    [known], _ = hardware._llama_cpp_gpus([])
    assert known.bandwidth_gbps == 624.0
    assert known.bandwidth_text().startswith("624 GB/s (table; a copy on it, measured ")
    assert known.bandwidth_text().endswith(": 540 GB/s)")
    # nvidia-smi's entry gains the copy measured on its card
    probe(replace(device("NVIDIA H200", memory=141 << 30, backend="CUDA"), copy_gbps=3900.0))
    smi = [GPU("NVIDIA H200", "nvidia", 141 << 30, 140 << 30, "9.0", 4800.0)]
    assert hardware._llama_cpp_gpus(smi) == ([], [])
    assert (smi[0].bandwidth_gbps, smi[0].copy_gbps) == (4800.0, 3900.0)
    # a damaged readings file is measured anew, not an error
    (isolated_home.home / "gpu-bandwidth.json").write_text("{not json")
    probe(replace(device(unknown), copy_gbps=250.0))
    assert hardware._llama_cpp_gpus([])[0][0].bandwidth_gbps == 250.0


def test_the_copy_bandwidth_comes_after_the_devices_and_its_failure_costs_only_itself():
    import multiprocessing

    for message, expected in (({"Vulkan0": 12.5, "Vulkan1": None}, {"Vulkan0": 12.5,
                                                                     "Vulkan1": None}),
                              ({"error": "RuntimeError: vkQueueSubmit failed"}, {})):
        receive, send = multiprocessing.Pipe(duplex=False)
        send.send(message)
        assert gpu_devices._bandwidths(receive, 1.0) == expected
    receive, send = multiprocessing.Pipe(duplex=False)
    send.close()  # the child died measuring
    assert gpu_devices._bandwidths(receive, 1.0) == {}
    receive, send = multiprocessing.Pipe(duplex=False)
    assert gpu_devices._bandwidths(receive, 0.05) == {}  # it hangs


def test_a_card_two_backends_find_is_listed_once_as_the_first_found_it():
    from backends.llamacpp.ggml_backends import Device, first_of_each_gpu

    gib = 2**30
    cuda = Device("CUDA0", "NVIDIA GeForce RTX 4070", "gpu", "CUDA", 12 * gib, 11 * gib,
                  device_id="0000:01:00.0")
    vulkan = Device("Vulkan0", "NVIDIA GeForce RTX 4070", "gpu", "Vulkan", 12 * gib, 11 * gib,
                    device_id="0000:01:00.0")
    radeon = Device("Vulkan1", "AMD Radeon RX 7600", "gpu", "Vulkan", 8 * gib, 8 * gib,
                    device_id="0000:02:00.0")
    lavapipes = [Device(f"Vulkan{i}", "llvmpipe", "gpu", "Vulkan", 2 * gib, 2 * gib)
                 for i in (2, 3)]  # no PCI id: never taken for one another
    cpu = Device("CPU", "AMD EPYC", "cpu", "CPU", 32 * gib, 30 * gib)
    kept = first_of_each_gpu((cpu, cuda, vulkan, radeon, *lavapipes))
    assert [d.name for d in kept] == ["CPU", "CUDA0", "Vulkan1", "Vulkan2", "Vulkan3"]
