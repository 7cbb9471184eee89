"""The Machine page's CUDA download (app/gui/cuda_module_box.py): offered for an NVIDIA GPU
that llama.cpp drives through Vulkan when a manifest names the module, then downloaded with
its progress, cancelled and resumed, and verified, from a local server speaking the package
index's Simple API (tests/support/cuda_pack.py). The real window, with a real click under
Xvfb, was tried by hand (docs/notes/llama-vulkan.md)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

from app.config import Paths
from app.gpu_module.offer import offer_cuda_module
from app.gui.machine import MachinePanel
from app.hardware import GPU
from app.runtime import gpu_devices
from app.runtime.gpu_devices import DeviceReport, GgmlDevice
from tests.support.cuda_pack import MODULE, VERSION, served_release
from tests.support.machines import desktop

RTX = GPU("NVIDIA GeForce RTX 4070", "nvidia", 12 << 30, 11 << 30, "8.9", 504)
RTX_ON_VULKAN = GgmlDevice("Vulkan0", "NVIDIA GeForce RTX 4070", "gpu", "Vulkan", 12 << 30,
                           11 << 30)


@pytest.fixture
def nvidia_on_vulkan(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(gpu_devices, "_report", DeviceReport(devices=(RTX_ON_VULKAN,)))
    for name in ("PIP_INDEX_URL", "PIP_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    return desktop(gpus=(RTX,))


def test_offered_only_where_it_helps(nvidia_on_vulkan, isolated_home: Paths,
                                     monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("EMBER_CUDA_MANIFEST", raising=False)
    assert not offer_cuda_module(nvidia_on_vulkan.gpus, isolated_home)  # no download named
    monkeypatch.setenv("EMBER_CUDA_MANIFEST", "http://127.0.0.1:9/cuda-module.json")
    assert offer_cuda_module(nvidia_on_vulkan.gpus, isolated_home)
    assert not offer_cuda_module(desktop().gpus, isolated_home)  # no NVIDIA GPU
    cuda = GgmlDevice("CUDA0", RTX.name, "gpu", "CUDA", 12 << 30, 11 << 30)
    monkeypatch.setattr(gpu_devices, "_report", DeviceReport(devices=(cuda,)))
    assert not offer_cuda_module(nvidia_on_vulkan.gpus, isolated_home)  # CUDA already runs it


def test_one_click_downloads_it_with_progress_cancel_and_resume(
        qtbot, nvidia_on_vulkan, isolated_home: Paths, monkeypatch: pytest.MonkeyPatch):
    with served_release(module_bytes_per_s=100_000) as release:
        monkeypatch.setenv("EMBER_PYPI_INDEX", release.index.index_url)
        monkeypatch.setenv("EMBER_CUDA_MANIFEST", release.url)
        panel = MachinePanel(nvidia_on_vulkan, set(), home=isolated_home)
        qtbot.addWidget(panel)
        box = panel.cuda_box
        assert box is not None and box.button.text() == "Download the CUDA backend"
        assert "run on this GPU through Vulkan" in box.findChildren(QLabel)[1].text()
        qtbot.mouseClick(box.button, Qt.MouseButton.LeftButton)
        assert box.state == "running" and box.button.text() == "Cancel"
        qtbot.waitUntil(lambda: " / " in box.detail.text(), timeout=10_000)  # bytes so far
        qtbot.mouseClick(box.button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: box.state == "cancelled", timeout=10_000)
        assert box.button.text() == "Resume" and "Resume continues it" in box.detail.text()
        release.index.projects["ember-release"][0].bytes_per_s = None
        qtbot.mouseClick(box.button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: box.state == "done", timeout=20_000)
    assert box.button.text() == "Installed" and not box.button.isEnabled()
    assert "Installed and verified" in box.detail.text()
    module = isolated_home.home / "llama-modules" / "cuda" / "libggml-cuda.so"
    assert module.read_bytes() == MODULE
    ranges = [r["range"] for r in release.index.file_gets() if "libggml-cuda" in r["path"]]
    assert ranges[0] is None and ranges[-1] is not None  # the resume continued the file
    # installed: the page offers it no more
    assert MachinePanel(nvidia_on_vulkan, set(), home=isolated_home).cuda_box is None


def test_a_failed_download_says_why_and_offers_a_retry(
        qtbot, nvidia_on_vulkan, isolated_home: Paths, monkeypatch: pytest.MonkeyPatch):
    with served_release() as release:
        monkeypatch.setenv("EMBER_PYPI_INDEX", release.index.index_url)
        monkeypatch.setenv("EMBER_CUDA_MANIFEST", release.url)
        release.index.projects["ember-release"][0].data = b"tampered"
        panel = MachinePanel(nvidia_on_vulkan, set(), home=isolated_home)
        qtbot.addWidget(panel)
        qtbot.mouseClick(panel.cuda_box.button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: panel.cuda_box.state == "failed", timeout=10_000)
    assert panel.cuda_box.button.text() == "Retry"
    assert "checksum mismatch for libggml-cuda.so" in panel.cuda_box.detail.text()
    assert not (isolated_home.home / "llama-modules" / "cuda").exists()


def test_offered_again_when_the_installed_one_is_for_another_llama_cpp(
        nvidia_on_vulkan, isolated_home: Paths, monkeypatch: pytest.MonkeyPatch):
    import json

    monkeypatch.setenv("EMBER_CUDA_MANIFEST", "http://127.0.0.1:9/cuda-module.json")
    folder = isolated_home.home / "llama-modules" / "cuda"
    folder.mkdir(parents=True)
    (folder / "libggml-cuda.so").write_bytes(MODULE)
    record = {"backend": "cuda", "llama_cpp_version": "0.0.1", "platform": "linux-x86_64"}
    (folder / "module.json").write_text(json.dumps(record))
    assert offer_cuda_module(nvidia_on_vulkan.gpus, isolated_home)
    record["llama_cpp_version"] = VERSION
    (folder / "module.json").write_text(json.dumps(record))
    assert not offer_cuda_module(nvidia_on_vulkan.gpus, isolated_home)


def test_without_vulkan_it_says_the_cpu_runs_them(qtbot, isolated_home: Paths,
                                                   monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(gpu_devices, "_report", DeviceReport())  # no Vulkan device either
    monkeypatch.setenv("EMBER_CUDA_MANIFEST", "http://127.0.0.1:9/cuda-module.json")
    panel = MachinePanel(desktop(gpus=(RTX,)), set(), home=isolated_home)
    qtbot.addWidget(panel)
    assert panel.cuda_box is not None
    heading, about = panel.cuda_box.findChildren(QLabel)[:2]
    assert heading.text() == "Use your NVIDIA GPU" and "run on the CPU" in about.text()
