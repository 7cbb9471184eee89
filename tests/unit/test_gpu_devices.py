"""The GPUs llama.cpp's backends report (app.runtime.gpu_devices), as the hardware profile,
`ember hw` and the backend choice take them: vendors from real device names, when the child is not
asked, and AMD/Intel GPUs beside nvidia-smi's. The child itself runs in
tests/integration/test_llama_vulkan.py."""

from __future__ import annotations

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
